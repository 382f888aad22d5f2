//! A real engine's server for the end-to-end tests, started by a fixture's `serve.py`
//! (llama.cpp, vLLM): it prints one JSON line saying where it listens, then serves; the
//! guard stops it by its PID when dropped, also on a panic.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A server this test started.
pub struct Server {
    child: Child,
    pub url: String,
    /// How long to wait after the process exits (vLLM's engine process outlives its API
    /// server by a few seconds).
    settle: Duration,
}

impl Drop for Server {
    fn drop(&mut self) {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                std::thread::sleep(self.settle);
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `python SCRIPT MODEL ARGS…` (SCRIPT relative to the repository) and reads the
/// URL from its first line, within `timeout`.
pub fn spawn(
    python: &str,
    script: &str,
    model: &str,
    args: &[&str],
    timeout: Duration,
    settle: Duration,
) -> Server {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(script);
    let mut child = Command::new(python)
        .arg(&script)
        .arg(model)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("start {}: {e}", script.display()));
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    // Guard first, so a failure below still stops the process.
    let mut server = Server {
        child,
        url: String::new(),
        settle,
    };
    let line = rx
        .recv_timeout(timeout)
        .expect("serve.py says where it listens");
    let v: serde_json::Value = serde_json::from_str(&line).expect("a JSON line");
    server.url = v["url"].as_str().expect("url").to_string();
    eprintln!("{}: {line}", script.display());
    server
}

/// Waits until `GET /health` answers 200 within `timeout`; fails at once when the
/// server's process exits first.
pub async fn wait_healthy(server: &mut Server, timeout: Duration) {
    let started = Instant::now();
    let client = reqwest::Client::new();
    loop {
        if let Ok(r) = client.get(format!("{}/health", server.url)).send().await
            && r.status().is_success()
        {
            eprintln!("ready in {:.0} s", started.elapsed().as_secs_f64());
            return;
        }
        if let Ok(Some(status)) = server.child.try_wait() {
            panic!("the server exited before it was ready: {status}");
        }
        assert!(
            started.elapsed() < timeout,
            "{}/health never answered 200",
            server.url
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
