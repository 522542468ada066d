//! Writing values and commands to the wire.

use crate::value::{Proto, Value};

/// Appends `value` to `out` as `proto` carries it.
///
/// RESP2 has no maps, sets, pushes, doubles, booleans, big numbers or
/// verbatim strings: maps become flat `[k, v, k, v]` arrays, sets and pushes
/// arrays, a boolean the integer 1 or 0, a double, big number or verbatim
/// string a bulk string of its text, and null `$-1`. A CR or LF inside a
/// simple string or error would end its line early, so each becomes a space.
pub fn encode(value: &Value, proto: Proto, out: &mut Vec<u8>) {
    match value {
        Value::Simple(s) => line(out, b'+', s.as_bytes()),
        Value::Error(s) => line(out, b'-', s.as_bytes()),
        Value::Integer(i) => header(out, b':', *i),
        Value::Bulk(b) => blob(out, b'$', b),
        Value::Null => match proto {
            Proto::Resp2 => out.extend_from_slice(b"$-1\r\n"),
            Proto::Resp3 => out.extend_from_slice(b"_\r\n"),
        },
        Value::Array(items) => aggregate(out, b'*', items, proto),
        Value::Set(items) => {
            let tag = if proto == Proto::Resp3 { b'~' } else { b'*' };
            aggregate(out, tag, items, proto)
        }
        Value::Push(items) => {
            let tag = if proto == Proto::Resp3 { b'>' } else { b'*' };
            aggregate(out, tag, items, proto)
        }
        Value::Map(pairs) => {
            match proto {
                Proto::Resp3 => header(out, b'%', len_i64(pairs.len())),
                Proto::Resp2 => header(out, b'*', len_i64(pairs.len()).saturating_mul(2)),
            }
            for (k, v) in pairs {
                encode(k, proto, out);
                encode(v, proto, out);
            }
        }
        Value::Double(d) => {
            let text = double_text(*d);
            match proto {
                Proto::Resp3 => line(out, b',', text.as_bytes()),
                Proto::Resp2 => blob(out, b'$', text.as_bytes()),
            }
        }
        Value::Boolean(b) => match proto {
            Proto::Resp3 => out.extend_from_slice(if *b { b"#t\r\n" } else { b"#f\r\n" }),
            Proto::Resp2 => header(out, b':', i64::from(*b)),
        },
        Value::BigNumber(s) => match proto {
            Proto::Resp3 => line(out, b'(', s.as_bytes()),
            Proto::Resp2 => blob(out, b'$', s.as_bytes()),
        },
        Value::Verbatim(s) => match proto {
            Proto::Resp3 => {
                header(out, b'=', len_i64(s.len() + 4));
                out.extend_from_slice(b"txt:");
                out.extend_from_slice(s.as_bytes());
                out.extend_from_slice(b"\r\n");
            }
            Proto::Resp2 => blob(out, b'$', s.as_bytes()),
        },
    }
}

/// Appends a command, `*N\r\n` then each argument as a bulk string: the
/// form every client sends and every server accepts.
pub fn encode_command<A: AsRef<[u8]>>(args: &[A], out: &mut Vec<u8>) {
    header(out, b'*', len_i64(args.len()));
    for a in args {
        blob(out, b'$', a.as_ref());
    }
}

fn aggregate(out: &mut Vec<u8>, tag: u8, items: &[Value], proto: Proto) {
    header(out, tag, len_i64(items.len()));
    for v in items {
        encode(v, proto, out);
    }
}

fn blob(out: &mut Vec<u8>, tag: u8, bytes: &[u8]) {
    header(out, tag, len_i64(bytes.len()));
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
}

fn line(out: &mut Vec<u8>, tag: u8, text: &[u8]) {
    out.push(tag);
    out.extend(
        text.iter()
            .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
    );
    out.extend_from_slice(b"\r\n");
}

fn header(out: &mut Vec<u8>, tag: u8, n: i64) {
    out.push(tag);
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
    out.extend_from_slice(b"\r\n");
}

fn len_i64(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// RESP3's spelling: `inf`, `-inf`, `nan`, else the shortest text that
/// reads back as the same number.
fn double_text(d: f64) -> String {
    if d.is_nan() {
        "nan".to_owned()
    } else if d.is_infinite() {
        if d > 0.0 { "inf" } else { "-inf" }.to_owned()
    } else {
        // `{:?}` keeps `1.0` (not `1`) and switches to exponent form for
        // very large or small magnitudes, which RESP3 allows.
        format!("{d:?}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(v: &Value, p: Proto) -> String {
        let mut out = Vec::new();
        encode(v, p, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn resp2_downgrades_resp3_types() {
        let map = Value::Map(vec![(Value::simple("a"), Value::Integer(1))]);
        assert_eq!(enc(&map, Proto::Resp2), "*2\r\n+a\r\n:1\r\n");
        assert_eq!(enc(&map, Proto::Resp3), "%1\r\n+a\r\n:1\r\n");
        assert_eq!(enc(&Value::Null, Proto::Resp2), "$-1\r\n");
        assert_eq!(enc(&Value::Null, Proto::Resp3), "_\r\n");
        assert_eq!(enc(&Value::Boolean(true), Proto::Resp2), ":1\r\n");
        assert_eq!(enc(&Value::Boolean(false), Proto::Resp3), "#f\r\n");
        assert_eq!(enc(&Value::Double(1.5), Proto::Resp2), "$3\r\n1.5\r\n");
        assert_eq!(enc(&Value::Double(1.0), Proto::Resp3), ",1.0\r\n");
        assert_eq!(
            enc(&Value::Double(f64::NEG_INFINITY), Proto::Resp3),
            ",-inf\r\n"
        );
        let push = Value::Push(vec![Value::bulk("lost")]);
        assert_eq!(enc(&push, Proto::Resp2), "*1\r\n$4\r\nlost\r\n");
        assert_eq!(enc(&push, Proto::Resp3), ">1\r\n$4\r\nlost\r\n");
        assert_eq!(
            enc(&Value::Verbatim("hi".into()), Proto::Resp3),
            "=6\r\ntxt:hi\r\n"
        );
        assert_eq!(enc(&Value::Set(vec![]), Proto::Resp2), "*0\r\n");
    }

    #[test]
    fn line_breaks_cannot_end_a_simple_line_early() {
        assert_eq!(
            enc(&Value::error("ERR a\r\nb"), Proto::Resp2),
            "-ERR a  b\r\n"
        );
    }

    #[test]
    fn commands_are_arrays_of_bulk_strings() {
        let mut out = Vec::new();
        encode_command(&["PING", ""], &mut out);
        assert_eq!(out, b"*2\r\n$4\r\nPING\r\n$0\r\n\r\n");
        out.clear();
        encode_command(&[b"a\r\nb".as_slice()], &mut out);
        assert_eq!(out, b"*1\r\n$4\r\na\r\nb\r\n");
    }
}
