//! Validating a node's output value against its frozen schema (`schema.stdout_json` for
//! command nodes: the whole retained stdout is one JSON value).
//!
//! Invariant: an output is recorded only when it was read completely and matches its
//! schema; truncated stdout, invalid JSON, floats and mismatches are typed failures with the
//! JSON path at fault, never a partial or coerced value.

use rho_ipc::data::Data;
use rho_ipc::program::Schema;

/// Checks `value` against `schema`; `Err` names the JSON path and what was expected.
pub fn validate(schema: &Schema, value: &Data) -> Result<(), String> {
    validate_at(schema, value, "$")
}

fn validate_at(schema: &Schema, value: &Data, path: &str) -> Result<(), String> {
    let mismatch = |expected: &str| {
        Err(format!(
            "{path}: expected {expected}, found {}",
            value.kind()
        ))
    };
    match (schema, value) {
        (Schema::Null, Data::Null)
        | (Schema::Bool, Data::Bool(_))
        | (Schema::Integer, Data::Int(_))
        | (Schema::String, Data::String(_)) => Ok(()),
        (Schema::Null, _) => mismatch("null"),
        (Schema::Bool, _) => mismatch("bool"),
        (Schema::Integer, _) => mismatch("integer"),
        (Schema::String, _) => mismatch("string"),
        (Schema::Enum { members }, v) => {
            if members.contains(v) {
                Ok(())
            } else {
                let listed: Vec<String> = members.iter().map(ToString::to_string).collect();
                Err(format!("{path}: {v} is not one of {}", listed.join(", ")))
            }
        }
        (Schema::List { items }, Data::List(values)) => {
            for (i, item) in values.iter().enumerate() {
                validate_at(items, item, &format!("{path}[{i}]"))?;
            }
            Ok(())
        }
        (Schema::List { .. }, _) => mismatch("list"),
        (Schema::Record { fields }, Data::Map(map)) => {
            for (name, field) in fields {
                match map.get(name) {
                    Some(v) => validate_at(&field.schema, v, &format!("{path}.{name}"))?,
                    None if field.optional => {}
                    None => return Err(format!("{path}: required field `{name}` is missing")),
                }
            }
            if let Some(extra) = map.keys().find(|k| !fields.contains_key(*k)) {
                return Err(format!("{path}: field `{extra}` is not in the schema"));
            }
            Ok(())
        }
        (Schema::Record { .. }, _) => mismatch("record"),
        (Schema::StdoutJson { .. }, _) => Err(format!(
            "{path}: stdout_json cannot describe a value nested inside an output"
        )),
    }
}

/// Parses a command's retained stdout as the node's output value.
pub fn parse_stdout_json(bytes: &[u8], schema: &Schema) -> Result<Data, String> {
    let json: serde_json::Value = serde_json::from_slice(bytes)
        .map_err(|e| format!("stdout_json: stdout is not valid JSON: {e}"))?;
    let data = Data::from_json(&json).map_err(|e| format!("stdout_json: {e}"))?;
    validate(schema, &data)
        .map_err(|e| format!("stdout_json: output does not match its schema: {e}"))?;
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rho_ipc::program::RecordField;

    fn record() -> Schema {
        Schema::Record {
            fields: [
                (
                    "count".to_owned(),
                    RecordField {
                        schema: Schema::Integer,
                        optional: false,
                    },
                ),
                (
                    "tags".to_owned(),
                    RecordField {
                        schema: Schema::List {
                            items: Box::new(Schema::String),
                        },
                        optional: true,
                    },
                ),
            ]
            .into(),
        }
    }

    #[test]
    fn matching_value_is_accepted() {
        assert_eq!(
            parse_stdout_json(br#"{"count": 2, "tags": ["a"]}"#, &record()).unwrap(),
            Data::Map(
                [
                    ("count".to_owned(), Data::Int(2)),
                    (
                        "tags".to_owned(),
                        Data::List(vec![Data::String("a".into())])
                    ),
                ]
                .into()
            )
        );
        assert!(parse_stdout_json(br#"{"count": 2}"#, &record()).is_ok());
    }

    #[test]
    fn mismatches_name_the_path() {
        let err = parse_stdout_json(br#"{"count": "2"}"#, &record()).unwrap_err();
        assert!(
            err.contains("$.count: expected integer, found string"),
            "{err}"
        );
        let err = parse_stdout_json(br#"{"count": 1, "tags": [1]}"#, &record()).unwrap_err();
        assert!(err.contains("$.tags[0]: expected string"), "{err}");
        let err = parse_stdout_json(br#"{"tags": []}"#, &record()).unwrap_err();
        assert!(err.contains("required field `count`"), "{err}");
        let err = parse_stdout_json(br#"{"count": 1, "x": 1}"#, &record()).unwrap_err();
        assert!(err.contains("field `x` is not in the schema"), "{err}");
        let err = parse_stdout_json(b"{not json", &record()).unwrap_err();
        assert!(err.contains("not valid JSON"), "{err}");
        let err = parse_stdout_json(b"1.5", &Schema::Integer).unwrap_err();
        assert!(err.contains("only integers"), "{err}");
        let e = Schema::Enum {
            members: vec![Data::String("ok".into())],
        };
        assert!(parse_stdout_json(br#""ok""#, &e).is_ok());
        assert!(
            parse_stdout_json(br#""no""#, &e)
                .unwrap_err()
                .contains("is not one of")
        );
    }
}
