//! Response heads and bodies as the transport decodes them, under any read split.

use tokentrace_recorder::send::http::{BodyDecoder, BodyKind, parse_head};

/// Decodes `body` fed in pieces of `piece` bytes; returns the payload and the bytes left
/// after the body's end.
fn decode(kind: BodyKind, wire: &[u8], piece: usize) -> Result<(Vec<u8>, usize), String> {
    let mut d = BodyDecoder::new(kind);
    let mut out = Vec::new();
    let mut left = 0;
    for part in wire.chunks(piece) {
        if d.done() {
            left += part.len();
            continue;
        }
        let used = d.decode(part, &mut out)?;
        left += part.len() - used;
    }
    if !d.done() && !d.until_eof() {
        return Err("body not done".to_string());
    }
    Ok((out, left))
}

#[test]
fn chunked_bodies_under_any_split() {
    let wire =
        b"5\r\nhello\r\n17;ext=1\r\ndata: {\"a\":1}\n\ndata: [D\r\n0\r\nx-trailer: 1\r\n\r\nEXTRA";
    let payload = b"hellodata: {\"a\":1}\n\ndata: [D";
    for piece in [1, 2, 3, 7, 1000] {
        let (out, left) = decode(BodyKind::Chunked, wire, piece).expect("decodes");
        assert_eq!(out, payload, "pieces of {piece}");
        assert_eq!(left, 5, "the bytes after the body are not consumed");
    }
    // Upper-case hex, LF-only lines, no trailer.
    let (out, _) = decode(BodyKind::Chunked, b"A\nabcdefghij\n0\n\n", 4).expect("lenient");
    assert_eq!(out, b"abcdefghij");
}

#[test]
fn broken_chunked_bodies_are_errors() {
    for bad in [
        &b"zz\r\n"[..],
        b"\r\n",
        b"3\r\nabcd\r\n",
        b"ffffffffffffffffff\r\n",
        b"3\rX",
    ] {
        assert!(decode(BodyKind::Chunked, bad, 1).is_err(), "{bad:?}");
    }
    let long = vec![b'1'; 5000];
    assert!(decode(BodyKind::Chunked, &long, 100).is_err());
}

#[test]
fn length_and_eof_bodies() {
    let (out, left) = decode(BodyKind::Length(4), b"abcdef", 3).expect("ok");
    assert_eq!((out.as_slice(), left), (&b"abcd"[..], 2));
    let (out, left) = decode(BodyKind::Eof, b"abcdef", 2).expect("ok");
    assert_eq!((out.as_slice(), left), (&b"abcdef"[..], 0));
}

#[test]
fn heads() {
    let h = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nTransfer-Encoding: chunked\r\nx-request-id: abc\r\n\r\nbody";
    let (head, len) = parse_head(h).expect("ok").expect("complete");
    assert_eq!(len, h.len() - 4);
    assert_eq!(head.status, 200);
    assert_eq!(head.body, BodyKind::Chunked);
    assert!(head.keep_alive);
    assert_eq!(head.request_id.as_deref(), Some("abc"));
    assert_eq!(parse_head(&h[..20]).expect("ok"), None, "partial");
    let h = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 12\r\nConnection: close\r\n\r\n";
    let (head, _) = parse_head(h).expect("ok").expect("complete");
    assert_eq!(
        (head.status, head.body, head.keep_alive),
        (400, BodyKind::Length(12), false)
    );
    let h = b"HTTP/1.0 200 OK\r\n\r\n";
    let (head, _) = parse_head(h).expect("ok").expect("complete");
    assert_eq!((head.body, head.keep_alive), (BodyKind::Eof, false));
    assert!(parse_head(b"SSH-2.0-OpenSSH\r\n\r\n").is_err());
    let h = b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n";
    assert!(parse_head(h).is_err());
}

/// A read's time is the kernel's receipt of its bytes: bytes left 30 ms in the socket
/// before the read say so (`read_age_ns`), so a recorder slow to get to a read does not
/// count its delay as the server's. Reads that drain the socket leave the connection
/// ready for the next bytes (none lost, none waited for), and the end reads as 0.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn reads_carry_how_long_their_bytes_waited() {
    use std::io::Write;
    use std::time::Duration;
    use tokentrace_recorder::send::http::Transport;

    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!(
        "http://{}/v1/completions",
        listener.local_addr().expect("addr")
    );
    let transport = Transport::new(&url, &[]).expect("transport");
    let mut conn = transport.connect().await.expect("connect");
    let (mut server, _) = listener.accept().expect("accept");
    // One read, or a failure after 5 s.
    async fn read(conn: &mut tokentrace_recorder::send::http::Conn) -> usize {
        tokio::time::timeout(Duration::from_secs(5), conn.read_more())
            .await
            .expect("the read returns: bytes waiting are read, not waited for")
            .expect("read")
    }
    let mut seen = Vec::new();
    let mut ages = Vec::new();
    // The kernel turns stamping on for the host through deferred work: the first
    // segments after the first socket asks may come unstamped, so a few rounds.
    for round in 0..20u8 {
        server.write_all(&[b'a' + round]).expect("write");
        tokio::time::sleep(Duration::from_millis(30)).await;
        let n = read(&mut conn).await;
        assert_eq!(n, 1);
        seen.extend_from_slice(conn.pending());
        conn.consume(n);
        ages.push(conn.read_age_ns());
        if conn.read_age_ns() > 0 {
            break;
        }
    }
    let age = ages.iter().copied().find(|&a| a > 0);
    let age = age.unwrap_or_else(|| panic!("no read stamped in {} rounds", ages.len()));
    assert!(
        (30_000_000..10_000_000_000).contains(&age),
        "bytes left 30 ms in the socket read with an age of {age} ns"
    );
    // Bytes that come after a read drained the socket are read at once.
    for word in [&b"more"[..], b"and more"] {
        server.write_all(word).expect("write");
        let n = read(&mut conn).await;
        assert_eq!(conn.pending(), word);
        conn.consume(n);
        assert!(conn.read_age_ns() < 5_000_000_000);
    }
    drop(server);
    assert_eq!(read(&mut conn).await, 0, "the end of the stream");
    assert_eq!(seen.first(), Some(&b'a'));
}
