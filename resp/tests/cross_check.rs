//! Cross-checks against an established decoder and encoder (redis-protocol
//! 6): whatever one side writes, the other reads as the same value.

mod common;

use bytes::BytesMut;
use holdline_resp::{encode, Decoder, Proto, Value};
use proptest::prelude::*;
use redis_protocol::resp2::types::OwnedFrame as Frame2;
use redis_protocol::resp3::types::{OwnedFrame as Frame3, Resp3Frame, VerbatimStringFormat};

fn ours(bytes: &[u8]) -> Value {
    let mut buf = BytesMut::from(bytes);
    let v = Decoder::new(1 << 20).decode(&mut buf).unwrap().unwrap();
    assert!(buf.is_empty());
    v
}

fn from2(f: Frame2) -> Value {
    match f {
        Frame2::SimpleString(s) => Value::Simple(String::from_utf8_lossy(&s).into_owned()),
        Frame2::Error(s) => Value::Error(s),
        Frame2::Integer(i) => Value::Integer(i),
        Frame2::BulkString(b) => Value::Bulk(b),
        Frame2::Array(items) => Value::Array(items.into_iter().map(from2).collect()),
        Frame2::Null => Value::Null,
    }
}

fn text(b: Vec<u8>) -> String {
    String::from_utf8(b).unwrap()
}

fn from3(f: Frame3) -> Value {
    match f {
        Frame3::BlobString { data, .. } => Value::Bulk(data),
        Frame3::BlobError { data, .. } => Value::Error(text(data)),
        Frame3::SimpleString { data, .. } => Value::Simple(text(data)),
        Frame3::SimpleError { data, .. } => Value::Error(data),
        Frame3::Boolean { data, .. } => Value::Boolean(data),
        Frame3::Null => Value::Null,
        Frame3::Number { data, .. } => Value::Integer(data),
        Frame3::Double { data, .. } => Value::Double(data),
        Frame3::BigNumber { data, .. } => Value::BigNumber(text(data)),
        Frame3::VerbatimString { data, .. } => Value::Verbatim(text(data)),
        Frame3::Array { data, .. } => Value::Array(data.into_iter().map(from3).collect()),
        Frame3::Push { data, .. } => Value::Push(data.into_iter().map(from3).collect()),
        Frame3::Set { data, .. } => Value::Set(data.into_iter().map(from3).collect()),
        Frame3::Map { data, .. } => Value::Map(
            data.into_iter()
                .map(|(k, v)| (from3(k), from3(v)))
                .collect(),
        ),
        other => panic!("unexpected frame {other:?}"),
    }
}

fn to3(v: &Value) -> Frame3 {
    let attributes = None;
    match v {
        Value::Simple(s) => Frame3::SimpleString {
            data: s.clone().into_bytes(),
            attributes,
        },
        Value::Error(s) => Frame3::SimpleError {
            data: s.clone(),
            attributes,
        },
        Value::Integer(i) => Frame3::Number {
            data: *i,
            attributes,
        },
        Value::Bulk(b) => Frame3::BlobString {
            data: b.clone(),
            attributes,
        },
        Value::Null => Frame3::Null,
        Value::Array(items) => Frame3::Array {
            data: items.iter().map(to3).collect(),
            attributes,
        },
        Value::Push(items) => Frame3::Push {
            data: items.iter().map(to3).collect(),
            attributes,
        },
        Value::Set(items) => Frame3::Set {
            data: items.iter().map(to3).collect(),
            attributes,
        },
        Value::Map(pairs) => Frame3::Map {
            data: pairs.iter().map(|(k, v)| (to3(k), to3(v))).collect(),
            attributes,
        },
        Value::Double(d) => Frame3::Double {
            data: *d,
            attributes,
        },
        Value::Boolean(b) => Frame3::Boolean {
            data: *b,
            attributes,
        },
        Value::BigNumber(s) => Frame3::BigNumber {
            data: s.clone().into_bytes(),
            attributes,
        },
        Value::Verbatim(s) => Frame3::VerbatimString {
            data: s.clone().into_bytes(),
            format: VerbatimStringFormat::Text,
            attributes,
        },
    }
}

/// Map entries and set members in one order: redis-protocol's decoder
/// keeps them in hash order.
fn canonical(v: Value) -> Value {
    match v {
        Value::Map(pairs) => {
            let mut pairs: Vec<_> = pairs
                .into_iter()
                .map(|(k, v)| (canonical(k), canonical(v)))
                .collect();
            pairs.sort_by_key(|(k, _)| format!("{k:?}"));
            Value::Map(pairs)
        }
        Value::Set(items) => {
            let mut items: Vec<_> = items.into_iter().map(canonical).collect();
            items.sort_by_key(|v| format!("{v:?}"));
            Value::Set(items)
        }
        Value::Array(items) => Value::Array(items.into_iter().map(canonical).collect()),
        Value::Push(items) => Value::Push(items.into_iter().map(canonical).collect()),
        other => other,
    }
}

/// redis-protocol cannot carry a set or map key that is itself an aggregate,
/// nor (in RESP2) anything but RESP2's own types.
fn resp2_value() -> impl Strategy<Value = Value> {
    common::value().prop_map(|v| common::downgraded(&v))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn resp2_we_write_they_read(v in resp2_value()) {
        let mut bytes = Vec::new();
        encode(&v, Proto::Resp2, &mut bytes);
        let (frame, used) = redis_protocol::resp2::decode::decode(&bytes).unwrap().unwrap();
        prop_assert_eq!(used, bytes.len());
        prop_assert_eq!(from2(frame), ours(&bytes));
    }

    #[test]
    fn resp3_we_write_they_read(v in common::value()) {
        let mut bytes = Vec::new();
        encode(&v, Proto::Resp3, &mut bytes);
        let (frame, used) = redis_protocol::resp3::decode::complete::decode(&bytes).unwrap().unwrap();
        prop_assert_eq!(used, bytes.len());
        prop_assert_eq!(canonical(from3(frame)), canonical(v));
    }

    #[test]
    fn resp3_they_write_we_read(v in common::value()) {
        let frame = to3(&v);
        let mut bytes = vec![0; frame.encode_len(false)];
        let n = redis_protocol::resp3::encode::complete::encode(&mut bytes, &frame, false).unwrap();
        prop_assert_eq!(ours(&bytes[..n]), v);
    }

    /// On any bytes, both decoders agree on whether a whole frame is there
    /// and on how long it is (we may refuse forms they tolerate, never the
    /// other way round).
    #[test]
    fn both_decoders_find_the_same_frames(v in common::value(), cut in any::<prop::sample::Index>()) {
        let mut bytes = Vec::new();
        encode(&v, Proto::Resp3, &mut bytes);
        let cut = cut.index(bytes.len() + 1);
        let theirs = redis_protocol::resp3::decode::complete::decode(&bytes[..cut]).unwrap();
        let mut buf = BytesMut::from(&bytes[..cut]);
        let mine = Decoder::new(1 << 20).decode(&mut buf).unwrap();
        prop_assert_eq!(theirs.is_some(), mine.is_some());
    }
}
