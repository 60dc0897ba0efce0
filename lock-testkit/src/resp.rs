//! A minimal, blocking RESP client: one command per connection, enough to
//! drive and inspect test servers without depending on `redis-cli` or on the
//! client library under test.

use std::io::{self, BufRead, BufReader, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::Duration;

/// A parsed RESP reply.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Reply {
    /// `+OK`
    Simple(String),
    /// `-ERR ...`
    Error(String),
    /// `:1`
    Integer(i64),
    /// `$3\r\nfoo`, `None` for `$-1`.
    Bulk(Option<Vec<u8>>),
    /// `*2\r\n...`, `None` for `*-1`.
    Array(Option<Vec<Reply>>),
    /// RESP3 `_` null.
    Null,
    /// Other RESP3 scalars (`,` double, `#` boolean, `(` big number) as text.
    Other(String),
}

impl Reply {
    /// Render as text (see [`crate::RedisServer::cli`]).
    pub(crate) fn render(&self) -> String {
        match self {
            Reply::Simple(s) | Reply::Error(s) | Reply::Other(s) => s.clone(),
            Reply::Integer(n) => n.to_string(),
            Reply::Bulk(Some(b)) => String::from_utf8_lossy(b).into_owned(),
            Reply::Bulk(None) | Reply::Array(None) | Reply::Null => "(nil)".to_owned(),
            Reply::Array(Some(items)) => items
                .iter()
                .map(Reply::render)
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }

    /// The text of a simple or bulk string reply (bulk decoded as lossy
    /// UTF-8); `None` for any other kind of reply.
    pub(crate) fn as_text(&self) -> Option<String> {
        match self {
            Reply::Simple(s) => Some(s.clone()),
            Reply::Bulk(Some(b)) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        }
    }

    /// The elements of an array reply; `None` for any other kind of reply
    /// (a nil array included).
    pub(crate) fn as_array(&self) -> Option<&[Reply]> {
        match self {
            Reply::Array(Some(items)) => Some(items),
            _ => None,
        }
    }

    /// The value of `name` in a map reply sent as a flat
    /// `[key, value, key, value, ...]` array (RESP2's rendering of a map, as
    /// returned by e.g. `SENTINEL MASTER`), rendered as text.
    pub(crate) fn map_field(&self, name: &str) -> Option<String> {
        self.as_array()?
            .chunks(2)
            .find(|kv| kv[0].as_text().as_deref() == Some(name))
            .and_then(|kv| kv.get(1))
            .map(Reply::render)
    }
}

/// Connect to `127.0.0.1:port`, `AUTH` if a password is given, send one
/// command and read its reply. A failed `AUTH` is returned as the reply.
pub(crate) fn command(
    port: u16,
    password: Option<&str>,
    args: &[&[u8]],
    timeout: Duration,
) -> io::Result<Reply> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    stream.set_nodelay(true)?;
    let mut writer = &stream;
    let mut reader = BufReader::new(&stream);

    if let Some(password) = password {
        writer.write_all(&encode(&[b"AUTH", password.as_bytes()]))?;
        match read_reply(&mut reader)? {
            // The password was removed at run time: go on without it.
            Reply::Error(e) if e.contains("without any password configured") => {}
            e @ Reply::Error(_) => return Ok(e),
            _ => {}
        }
    }
    writer.write_all(&encode(args))?;
    read_reply(&mut reader)
}

/// Encode a command as a RESP array of bulk strings.
fn encode(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

fn protocol_error(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

/// Read one line without its `\r\n`.
fn read_line(reader: &mut impl BufRead) -> io::Result<String> {
    let mut line = Vec::new();
    let n = reader.read_until(b'\n', &mut line)?;
    if n == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed by redis-server",
        ));
    }
    if !line.ends_with(b"\r\n") {
        return Err(protocol_error("truncated RESP line"));
    }
    line.truncate(line.len() - 2);
    Ok(String::from_utf8_lossy(&line).into_owned())
}

/// Parse a RESP length; negative means nil.
fn parse_len(s: &str) -> io::Result<Option<usize>> {
    let n: i64 = s
        .parse()
        .map_err(|_| protocol_error(format!("bad RESP length {s:?}")))?;
    Ok(usize::try_from(n).ok())
}

/// Read one RESP2 (or common RESP3) reply.
fn read_reply(reader: &mut impl BufRead) -> io::Result<Reply> {
    let line = read_line(reader)?;
    let mut chars = line.chars();
    let kind = chars
        .next()
        .ok_or_else(|| protocol_error("empty RESP line"))?;
    let rest = chars.as_str();
    Ok(match kind {
        '+' => Reply::Simple(rest.to_owned()),
        '-' => Reply::Error(rest.to_owned()),
        ':' => Reply::Integer(
            rest.parse()
                .map_err(|_| protocol_error(format!("bad RESP integer {rest:?}")))?,
        ),
        '$' | '=' | '!' => match parse_len(rest)? {
            None => Reply::Bulk(None),
            Some(len) => {
                let mut buf = vec![0; len + 2];
                reader.read_exact(&mut buf)?;
                if !buf.ends_with(b"\r\n") {
                    return Err(protocol_error("bulk string not terminated by CRLF"));
                }
                buf.truncate(len);
                if kind == '!' {
                    Reply::Error(String::from_utf8_lossy(&buf).into_owned())
                } else {
                    Reply::Bulk(Some(buf))
                }
            }
        },
        '*' | '~' | '>' | '%' | '|' => match parse_len(rest)? {
            None => Reply::Array(None),
            Some(len) => {
                let count = if matches!(kind, '%' | '|') {
                    len * 2
                } else {
                    len
                };
                let items = (0..count)
                    .map(|_| read_reply(reader))
                    .collect::<io::Result<Vec<_>>>()?;
                if kind == '|' {
                    // An attribute precedes the actual reply; skip it.
                    return read_reply(reader);
                }
                Reply::Array(Some(items))
            }
        },
        '_' => Reply::Null,
        ',' | '#' | '(' => Reply::Other(rest.to_owned()),
        other => return Err(protocol_error(format!("unknown RESP type {other:?}"))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: &[u8]) -> Reply {
        read_reply(&mut BufReader::new(bytes)).unwrap()
    }
    #[test]
    fn encodes_commands() {
        assert_eq!(
            encode(&[b"SET", b"k", b""]),
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n".to_vec()
        );
    }

    #[test]
    fn renders_replies() {
        assert_eq!(parse(b"+PONG\r\n").render(), "PONG");
        assert_eq!(parse(b"-ERR boom\r\n").render(), "ERR boom");
        assert_eq!(parse(b":-42\r\n").render(), "-42");
        assert_eq!(parse(b"$5\r\na\r\nbc\r\n").render(), "a\r\nbc");
        assert_eq!(parse(b"$0\r\n\r\n").render(), "");
        assert_eq!(parse(b"$-1\r\n").render(), "(nil)");
        assert_eq!(parse(b"*-1\r\n").render(), "(nil)");
        assert_eq!(parse(b"*0\r\n").render(), "");
        assert_eq!(
            parse(b"*4\r\n$1\r\na\r\n:1\r\n$-1\r\n*1\r\n+x\r\n").render(),
            "a\n1\n(nil)\nx"
        );
    }

    #[test]
    fn inspects_replies() {
        assert_eq!(parse(b"+OK\r\n").as_text().as_deref(), Some("OK"));
        assert_eq!(parse(b"$2\r\nhi\r\n").as_text().as_deref(), Some("hi"));
        assert_eq!(parse(b":1\r\n").as_text(), None);
        assert_eq!(parse(b"*-1\r\n").as_array(), None);
        let map = parse(b"*4\r\n$4\r\nname\r\n$1\r\nm\r\n$5\r\nflags\r\n$6\r\nmaster\r\n");
        assert_eq!(map.as_array().map(<[Reply]>::len), Some(4));
        assert_eq!(map.map_field("flags").as_deref(), Some("master"));
        assert_eq!(map.map_field("name").as_deref(), Some("m"));
        assert_eq!(map.map_field("m"), None);
        assert_eq!(map.map_field("nope"), None);
    }

    #[test]
    fn rejects_garbage() {
        assert!(read_reply(&mut BufReader::new(&b"?x\r\n"[..])).is_err());
        assert!(read_reply(&mut BufReader::new(&b"$3\r\nab"[..])).is_err());
        assert!(read_reply(&mut BufReader::new(&b""[..])).is_err());
    }
}
