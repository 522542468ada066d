//! Value strategies shared by the decoder's property tests.

use holdline_resp::Value;
use proptest::collection::{btree_map, btree_set, vec};
use proptest::prelude::*;

/// A double that reads back as itself (NaN is not equal to itself).
fn double() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<f64>().prop_filter("finite", |d| d.is_finite()),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        Just(0.5),
    ]
}

fn line_text() -> impl Strategy<Value = String> {
    "[^\r\n]{0,24}"
}

pub fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        line_text().prop_map(Value::Simple),
        "[A-Z]{1,8}( [^\r\n]{0,24})?".prop_map(Value::Error),
        any::<i64>().prop_map(Value::Integer),
        vec(any::<u8>(), 0..40).prop_map(Value::Bulk),
        Just(Value::Null),
        double().prop_map(Value::Double),
        any::<bool>().prop_map(Value::Boolean),
        "-?[1-9][0-9]{0,40}".prop_map(Value::BigNumber),
        ".{0,24}".prop_map(Value::Verbatim),
    ]
}

/// Any RESP3 value; map keys and set members distinct, so that a decoder
/// keeping them in a hash map sees the same entries.
pub fn value() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..6).prop_map(Value::Array),
            vec(inner.clone(), 0..6).prop_map(Value::Push),
            btree_set(key_text(), 0..6)
                .prop_map(|s| Value::Set(s.into_iter().map(Value::Simple).collect())),
            btree_map(key_text(), inner, 0..6).prop_map(|m| {
                Value::Map(m.into_iter().map(|(k, v)| (Value::Simple(k), v)).collect())
            }),
        ]
    })
}

fn key_text() -> impl Strategy<Value = String> {
    "[a-z0-9]{0,8}"
}

/// What a RESP2 peer receives for `v`: the encoder's downgrades.
pub fn downgraded(v: &Value) -> Value {
    match v {
        Value::Map(pairs) => Value::Array(
            pairs
                .iter()
                .flat_map(|(k, v)| [downgraded(k), downgraded(v)])
                .collect(),
        ),
        Value::Array(items) | Value::Set(items) | Value::Push(items) => {
            Value::Array(items.iter().map(downgraded).collect())
        }
        Value::Boolean(b) => Value::Integer(i64::from(*b)),
        Value::Double(d) => {
            let text = if d.is_infinite() {
                if *d > 0.0 { "inf" } else { "-inf" }.to_owned()
            } else {
                format!("{d:?}")
            };
            Value::Bulk(text.into_bytes())
        }
        Value::BigNumber(s) | Value::Verbatim(s) => Value::Bulk(s.clone().into_bytes()),
        other => other.clone(),
    }
}
