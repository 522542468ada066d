//! The decoder fed as a socket feeds it: whole, split at every byte, a byte
//! at a time, several frames back to back; and its limits and refusals.

mod common;

use bytes::BytesMut;
use holdline_resp::{encode, encode_command, Decoder, Proto, Value};
use proptest::prelude::*;

const LIMIT: usize = 1 << 20;

fn wire(v: &Value, proto: Proto) -> Vec<u8> {
    let mut out = Vec::new();
    encode(v, proto, &mut out);
    out
}

/// Feeds `bytes` in pieces ending at `cuts`, collecting every frame.
fn feed(decoder: &mut Decoder, bytes: &[u8], cuts: &[usize]) -> Vec<Value> {
    let mut buf = BytesMut::new();
    let mut frames = Vec::new();
    let mut from = 0;
    for &cut in cuts.iter().chain([bytes.len()].iter()) {
        let cut = cut.clamp(from, bytes.len());
        buf.extend_from_slice(&bytes[from..cut]);
        from = cut;
        while let Some(v) = decoder.decode(&mut buf).expect("well-formed") {
            frames.push(v);
        }
    }
    assert!(buf.is_empty(), "bytes left over: {buf:?}");
    assert!(!decoder.is_mid_frame());
    frames
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn resp3_round_trips_whatever_the_cuts(
        v in common::value(),
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..8),
    ) {
        let bytes = wire(&v, Proto::Resp3);
        let mut cuts: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
        cuts.sort_unstable();
        prop_assert_eq!(feed(&mut Decoder::new(LIMIT), &bytes, &cuts), vec![v]);
    }

    #[test]
    fn resp2_carries_the_downgraded_value(v in common::value()) {
        let bytes = wire(&v, Proto::Resp2);
        prop_assert_eq!(feed(&mut Decoder::new(LIMIT), &bytes, &[]), vec![common::downgraded(&v)]);
    }

    #[test]
    fn frames_back_to_back_byte_by_byte(vs in proptest::collection::vec(common::value(), 1..4)) {
        let mut bytes = Vec::new();
        for v in &vs {
            encode(v, Proto::Resp3, &mut bytes);
        }
        let cuts: Vec<usize> = (0..bytes.len()).collect();
        prop_assert_eq!(feed(&mut Decoder::new(LIMIT), &bytes, &cuts), vs);
    }

    #[test]
    fn commands_round_trip(args in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..16), 1..6)) {
        let mut bytes = Vec::new();
        encode_command(&args, &mut bytes);
        let expected = Value::Array(args.into_iter().map(Value::Bulk).collect());
        prop_assert_eq!(feed(&mut Decoder::new(LIMIT), &bytes, &[]), vec![expected]);
    }

    /// Garbage never panics, and the decoder never holds more than the
    /// limit: it answers frames, asks for more, or refuses.
    #[test]
    fn garbage_is_refused_or_bounded(bytes in proptest::collection::vec(any::<u8>(), 0..256), inline in any::<bool>()) {
        let mut d = Decoder::new(64).inline(inline);
        let mut buf = BytesMut::new();
        for chunk in bytes.chunks(7) {
            buf.extend_from_slice(chunk);
            loop {
                match d.decode(&mut buf) {
                    Ok(Some(_)) => continue,
                    Ok(None) => break,
                    Err(_) => return Ok(()),
                }
            }
            prop_assert!(buf.len() <= 64 + 2, "{} bytes buffered", buf.len());
        }
    }
}

/// What `bytes` decode to, up to the first refusal (its text), fed whole
/// when `whole` and a byte at a time otherwise.
fn outcomes(bytes: &[u8], limit: usize, whole: bool) -> Vec<Result<Value, String>> {
    let mut d = Decoder::new(limit);
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    let step = if whole { bytes.len().max(1) } else { 1 };
    for chunk in bytes.chunks(step) {
        buf.extend_from_slice(chunk);
        loop {
            match d.decode(&mut buf) {
                Ok(Some(v)) => out.push(Ok(v)),
                Ok(None) => break,
                Err(e) => {
                    out.push(Err(e.to_string()));
                    return out;
                }
            }
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1024))]

    /// Commands whole in the buffer take a shorter path than frames fed
    /// in pieces: both read the same values and refuse with the same texts,
    /// whatever the arguments' count (either side of that path's limit),
    /// the frame limit, or one byte changed anywhere.
    #[test]
    fn a_whole_buffer_reads_as_the_same_bytes_a_byte_at_a_time(
        commands in proptest::collection::vec(
            proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..12), 1..20),
            1..4,
        ),
        limit in 8usize..400,
        change in proptest::option::of((any::<prop::sample::Index>(), any::<u8>())),
    ) {
        let mut bytes = Vec::new();
        for args in &commands {
            encode_command(args, &mut bytes);
        }
        if let Some((at, byte)) = change {
            let at = at.index(bytes.len());
            bytes[at] = byte;
        }
        prop_assert_eq!(outcomes(&bytes, limit, true), outcomes(&bytes, limit, false));
    }
}

#[test]
fn every_split_point_of_a_nested_frame() {
    let v = Value::Array(vec![
        Value::Map(vec![
            (
                Value::simple("k"),
                Value::Set(vec![Value::Integer(1), Value::bulk("a\r\nb")]),
            ),
            (Value::Integer(2), Value::Push(vec![])),
        ]),
        Value::Null,
        Value::Double(-2.25),
        Value::Verbatim("v".into()),
        Value::Array(vec![Value::Array(vec![Value::Boolean(false)])]),
    ]);
    let bytes = wire(&v, Proto::Resp3);
    for a in 0..=bytes.len() {
        for b in a..=bytes.len() {
            assert_eq!(
                feed(&mut Decoder::new(LIMIT), &bytes, &[a, b]),
                vec![v.clone()],
                "cut at {a} and {b}"
            );
        }
    }
}

fn decode_all(
    d: &mut Decoder,
    bytes: &[u8],
) -> Result<Option<Value>, holdline_resp::ProtocolError> {
    d.decode(&mut BytesMut::from(bytes))
}

#[test]
fn the_frame_limit_counts_the_whole_frame() {
    // Exactly at the limit passes; one byte over is refused.
    let mut bytes = Vec::new();
    encode_command(&["SET", "k", "vvvvvvvvvv"], &mut bytes);
    let n = bytes.len();
    assert!(decode_all(&mut Decoder::new(n), &bytes).unwrap().is_some());
    let err = decode_all(&mut Decoder::new(n - 1), &bytes).unwrap_err();
    assert!(err.is_too_large(), "{err}");
    assert_eq!(
        err.to_string(),
        format!("frame larger than {} bytes", n - 1)
    );
}

#[test]
fn a_header_promising_too_much_is_refused_before_its_body() {
    let mut d = Decoder::new(524_288);
    for header in [
        &b"$999999999\r\n"[..],
        b"*999999999\r\n",
        b"%300000000\r\n",
        b"*1\r\n$524288\r\n",
    ] {
        let err = decode_all(&mut d, header).unwrap_err();
        assert!(err.is_too_large(), "{header:?}: {err}");
    }
    // A line that never ends is refused once it alone passes the limit.
    let mut buf = BytesMut::from(&b"+"[..]);
    let mut d = Decoder::new(100);
    assert_eq!(d.decode(&mut buf), Ok(None));
    buf.extend_from_slice(&[b'a'; 100]);
    assert!(d.decode(&mut buf).unwrap_err().is_too_large());
}

#[test]
fn nesting_is_bounded() {
    let deep = |levels: usize| {
        let mut bytes = b"*1\r\n".repeat(levels);
        bytes.extend_from_slice(b":1\r\n");
        bytes
    };
    assert!(decode_all(&mut Decoder::new(LIMIT), &deep(64))
        .unwrap()
        .is_some());
    let err = decode_all(&mut Decoder::new(LIMIT), &deep(65)).unwrap_err();
    assert_eq!(err.to_string(), "aggregates nested deeper than 64");
    assert!(decode_all(&mut Decoder::new(LIMIT).max_depth(2), &deep(3)).is_err());
    // A million levels cost a refusal, not a stack overflow.
    assert!(decode_all(&mut Decoder::new(usize::MAX), &deep(1_000_000)).is_err());
}

#[test]
fn garbage_is_refused_with_a_reason() {
    let err = decode_all(&mut Decoder::new(LIMIT), b"GET / HTTP/1.1\r\n").unwrap_err();
    assert_eq!(
        err.to_string(),
        "unexpected byte 'G' where a type was expected"
    );
    let err = decode_all(&mut Decoder::new(LIMIT), b"*2\r\n$1\r\nab\r\n").unwrap_err();
    assert_eq!(err.to_string(), "bulk string not followed by CRLF");
}

#[test]
fn the_decoder_starts_afresh_after_a_refusal() {
    let mut d = Decoder::new(LIMIT);
    assert!(decode_all(&mut d, b"*2\r\n$x\r\n").is_err());
    assert!(!d.is_mid_frame());
    assert_eq!(decode_all(&mut d, b"+OK\r\n"), Ok(Some(Value::ok())));
}
