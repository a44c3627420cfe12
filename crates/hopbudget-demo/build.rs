//! Compile `proto/demo.proto` with protox (pure Rust: no `protoc` needed on the machine).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/demo.proto");
    let fds = protox::compile(["proto/demo.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
