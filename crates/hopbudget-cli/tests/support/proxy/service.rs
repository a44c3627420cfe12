//! A service in another language as a real process, which prints `port N` once it listens and
//! then a line per thing its handlers live through: what the tests read to see what the
//! service was told and when its work stopped.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

use super::PATIENCE;

/// A running service and the lines it prints; killed when dropped.
pub struct Service {
    pub addr: SocketAddr,
    lines: Lines<BufReader<ChildStdout>>,
    child: Child,
}

impl Service {
    /// Run `program` without arguments.
    pub async fn start(program: &Path) -> Self {
        Self::spawn(Command::new(program)).await
    }

    /// Run `command`, and wait for its `port N` line.
    pub async fn spawn(mut command: Command) -> Self {
        let mut child = command
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("the service {command:?} starts: {e}"));
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = tokio::time::timeout(PATIENCE, lines.next_line())
            .await
            .expect("the service says where it listens")
            .unwrap()
            .unwrap_or_else(|| panic!("the service {command:?} exited before listening"));
        let port: u16 = first
            .strip_prefix("port ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("not a port line: {first:?}"));
        Service {
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            lines,
            child,
        }
    }

    /// SIGTERM, and wait for the service to exit (a traced one flushes its spans first).
    pub async fn terminate(&mut self) -> std::process::ExitStatus {
        super::terminate(&mut self.child).await
    }

    /// The next line the service prints.
    pub async fn next_line(&mut self) -> String {
        tokio::time::timeout(PATIENCE, self.lines.next_line())
            .await
            .expect("the service reports in time")
            .unwrap()
            .expect("the service is running")
    }
}
