// The recipes of docs/guide/java.md, as one runnable service on the JDK alone
// (com.sun.net.httpserver and java.net.http.HttpClient, Java 17); the page quotes them from
// this file and crates/hopbudget-cli/tests/fleet/recipes.rs runs them behind
// `hopbudget proxy`.
//
// Serves on 127.0.0.1:0 and prints "port N" first. Routes:
//
//   /work        work that takes 30 s, bounded by the request's budget: answers 504 when it
//                runs out.
//   /call?to=URL calls URL through the proxy's egress (HTTP_PROXY), carrying the trace
//                context; answers with the call's status and body.

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.ProxySelector;
import java.net.URI;
import java.net.URLDecoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.concurrent.Executors;

public final class Recipes {
    // HttpClient reads no HTTP_PROXY: name the proxy's egress (--egress) as its proxy.
    static final HttpClient EGRESS = HttpClient.newBuilder()
            .proxy(ProxySelector.of(egress()))
            .version(HttpClient.Version.HTTP_1_1) // the egress takes HTTP/1.1
            .build();

    static InetSocketAddress egress() {
        URI proxy = URI.create(System.getenv("HTTP_PROXY")); // http://127.0.0.1:3128
        return new InetSocketAddress(proxy.getHost(), proxy.getPort());
    }

    // The budget the proxy handed over, in x-request-timeout-ms.
    static long budgetMs(HttpExchange exchange) {
        return Long.parseLong(exchange.getRequestHeaders().getFirst("x-request-timeout-ms"));
    }

    static final long ANSWER_MS = 20; // kept from the budget to answer in

    static void work(HttpExchange exchange) throws IOException, InterruptedException {
        // The proxy's own deadline comes only its margin later: keep time to answer in.
        long deadline = System.nanoTime() + (budgetMs(exchange) - ANSWER_MS) * 1_000_000;
        for (int step = 0; step < 300; step++) { // 30 s of work, in steps of at most 100 ms
            long left = deadline - System.nanoTime();
            if (left <= 0) {
                // Say so: the budget is spent, an answer now is one the caller no longer wants.
                answer(exchange, 504, "deadline exceeded\n");
                return;
            }
            Thread.sleep(Math.min(100, left / 1_000_000 + 1));
        }
        answer(exchange, 200, "done\n");
    }

    static void call(HttpExchange exchange, String to) throws IOException, InterruptedException {
        HttpRequest.Builder out = HttpRequest.newBuilder(URI.create(to))
                .timeout(Duration.ofMillis(budgetMs(exchange)));
        String traceparent = exchange.getRequestHeaders().getFirst("traceparent");
        if (traceparent != null) {
            out.header("traceparent", traceparent); // so the egress matches the call
        }
        HttpResponse<String> res = EGRESS.send(out.build(), HttpResponse.BodyHandlers.ofString());
        answer(exchange, res.statusCode(), res.body());
    }

    static void answer(HttpExchange exchange, int status, String body) throws IOException {
        byte[] bytes = body.getBytes(StandardCharsets.UTF_8);
        exchange.sendResponseHeaders(status, bytes.length);
        try (OutputStream out = exchange.getResponseBody()) {
            out.write(bytes);
        }
    }

    public static void main(String[] args) throws IOException {
        // Headers and body leave in one go: without it the body of a short answer can wait
        // for the proxy's delayed ACK (Nagle), past the proxy's deadline.
        System.setProperty("sun.net.httpserver.nodelay", "true");
        HttpServer server = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 0);
        server.setExecutor(Executors.newCachedThreadPool());
        server.createContext("/", exchange -> {
            try {
                String path = exchange.getRequestURI().getPath();
                String query = exchange.getRequestURI().getRawQuery();
                if (path.equals("/work")) {
                    work(exchange);
                } else if (path.equals("/call") && query != null && query.startsWith("to=")) {
                    call(exchange, URLDecoder.decode(query.substring(3), StandardCharsets.UTF_8));
                } else {
                    answer(exchange, 404, "");
                }
            } catch (Exception e) {
                answer(exchange, 502, e + "\n");
            }
        });
        server.start();
        System.out.println("port " + server.getAddress().getPort());
        System.out.flush();
    }
}
