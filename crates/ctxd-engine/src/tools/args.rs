//! Tool arguments as typed structs: the schema the model is offered is derived from the type
//! (schemars) and a call's arguments are read into the same type (serde), so the two cannot
//! drift apart.

use std::borrow::Cow;
use std::fmt;

use schemars::generate::{SchemaGenerator, SchemaSettings};
use schemars::transform::{RecursiveTransform, Transform};
use schemars::{json_schema, JsonSchema, Schema};
use serde::de::{self, DeserializeOwned, Deserializer, Unexpected, Visitor};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::EngineError;

/// The JSON Schema of `T` as a tool's parameters, in the plain shape providers are sent: every
/// subschema inline, no meta-schema, title or the type's own doc comment (they only cost
/// tokens), and nothing that speaks Rust (see [`plain`]).
pub(crate) fn parameters<T: JsonSchema>() -> Value {
    let generator = SchemaSettings::draft2020_12()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .into_generator();
    let mut schema = generator.into_root_schema_for::<T>();
    RecursiveTransform(plain).transform(&mut schema);
    let mut v = schema.to_value();
    if let Some(o) = v.as_object_mut() {
        o.remove("title");
        o.remove("description");
    }
    v
}

/// One subschema made plain.
fn plain(schema: &mut Schema) {
    // An `Option<T>` field is offered as `T`: null is accepted (as absent), never asked for.
    if let Some(Value::Array(types)) = schema.get_mut("type") {
        types.retain(|t| t != "null");
        if let [only] = types.as_slice() {
            let only = only.clone();
            schema.insert("type".into(), only);
        }
    }
    // Integer formats (`uint`, `int64`) name Rust's types; the bounds say what matters.
    schema.remove("format");
    // Doc comments are wrapped; a description is one line.
    if let Some(Value::String(d)) = schema.get_mut("description") {
        *d = d.replace('\n', " ");
    }
}

/// A call's `args` read into `T` (null reads as no arguments), or an error the model can act
/// on: the tool, the field and what is wrong with it.
pub(crate) fn parse<T: DeserializeOwned>(tool: &str, args: &Value) -> Result<T, EngineError> {
    static EMPTY: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    let object = match args {
        Value::Object(_) => args,
        Value::Null => EMPTY.get_or_init(|| Value::Object(Map::new())),
        _ => {
            return Err(EngineError::invalid(format!(
                "{tool}: arguments must be a JSON object"
            )))
        }
    };
    serde_path_to_error::deserialize(object).map_err(|e| {
        let field = e.path().to_string();
        let why = readable(&e.inner().to_string());
        // A missing or unknown field is named by serde's message already.
        if field == "." || why.contains(&format!("`{field}`")) {
            EngineError::invalid(format!("{tool}: {why}"))
        } else {
            EngineError::invalid(format!("{tool}: {field}: {why}"))
        }
    })
}

/// serde's message with Rust's integer types said in words.
fn readable(message: &str) -> String {
    [
        ("expected usize", "expected a whole number from 0"),
        ("expected u64", "expected a whole number from 0"),
        ("expected i64", "expected a whole number"),
    ]
    .iter()
    .fold(message.to_owned(), |m, (rust, words)| {
        m.replace(rust, words)
    })
}

/// An integer argument that a model may also write as a whole float (`3.0`), as some do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Whole(pub i64);

impl<'de> Deserialize<'de> for Whole {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Number;
        impl Visitor<'_> for Number {
            type Value = Whole;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a whole number")
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Whole, E> {
                Ok(Whole(v))
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Whole, E> {
                i64::try_from(v)
                    .map(Whole)
                    .map_err(|_| E::invalid_value(Unexpected::Unsigned(v), &self))
            }

            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Whole, E> {
                if v.fract() == 0.0 && v.abs() < 9e15 {
                    Ok(Whole(v as i64))
                } else {
                    Err(E::invalid_value(Unexpected::Float(v), &self))
                }
            }
        }
        d.deserialize_any(Number)
    }
}

impl JsonSchema for Whole {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> Cow<'static, str> {
        "Whole".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({"type": "integer"})
    }
}
