//! `tokentrace sim` as a user starts it: a process that says where it listens.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};

/// Kills the child when the test ends, passing or not.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn sim_says_where_it_listens_and_serves() {
    let mut child = Child(
        Command::new(env!("CARGO_BIN_EXE_tokentrace"))
            .args(["sim", "--profile", "tiny", "--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn"),
    );
    let stdout = child.0.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .expect("first line");
    let addr = line
        .trim()
        .strip_prefix("listening on http://")
        .unwrap_or_else(|| panic!("first line: {line:?}"))
        .to_string();
    assert!(
        addr.starts_with("127.0.0.1:") && !addr.ends_with(":0"),
        "{addr}"
    );
    let mut conn = TcpStream::connect(&addr).expect("connect");
    write!(
        conn,
        "GET /v1/models HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .expect("send");
    let mut reply = String::new();
    conn.read_to_string(&mut reply).expect("read");
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(reply.contains("\"id\":\"sim-tiny\""), "{reply}");
}

#[test]
fn sim_rejects_an_unknown_profile() {
    let out = Command::new(env!("CARGO_BIN_EXE_tokentrace"))
        .args([
            "sim",
            "--profile",
            "no-such-profile",
            "--listen",
            "127.0.0.1:0",
        ])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no-such-profile"));
}
