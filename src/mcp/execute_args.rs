//! What one `execute` call asks for: the tool's arguments as one typed definition, from which
//! both the input schema `tools/list` serves and the parser come.
//!
//! `ExecuteArguments` is that definition. Its fields are the schema's properties: their doc
//! comments are the descriptions the model reads, their `range`s the schema's `minimum`s (the
//! same constants the field's reader enforces), `deny_unknown_fields` its
//! `additionalProperties: false`. Serde reads a call's arguments into it, each field with the
//! message the model gets when its value is malformed. Which fields go together (`code`, or a
//! `cell` to look at, or a `rewind`) is left out of the schema (no `required`, no `oneOf`: the
//! plain object schema every client accepts), so `parse_args` checks it on the typed value and
//! turns it into a `Request`.
//!
//! Lenient on purpose: `null` reads as absent, and a whole float (`5000.0`: some clients send
//! every number as one) is a whole number; 1.5 is refused rather than rounded.
//!
//! Not here: the tool's description and metadata (`tool`), serving a request (`server`).

use std::sync::{Arc, LazyLock};

use rmcp::model::JsonObject;
use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, Schema};
use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

/// The least `timeout_ms`: a bound of 0 would abort every cell before it ran.
const LEAST_TIMEOUT_MS: u64 = 1;
/// The least `wait_ms`: 0 answers at once with what the cell printed so far.
const LEAST_WAIT_MS: u64 = 0;
/// Cells are numbered from 1 (`cell` and `rewind` name one).
const FIRST_CELL: u64 = 1;

/// The arguments of one `execute` call as the model writes them. Every field may be absent;
/// `parse_args` says which go together.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecuteArguments {
    /// Python code to run in the workspace, like one notebook cell.
    #[serde(default, deserialize_with = "python_code")]
    code: Option<String>,
    /// Abort the cell (KeyboardInterrupt) if it runs longer than this many milliseconds.
    #[serde(default, deserialize_with = "timeout_ms")]
    #[schemars(range(min = LEAST_TIMEOUT_MS))]
    timeout_ms: Option<u64>,
    /// How long this call waits for the cell before answering with its output so far; the
    /// cell keeps running either way.
    #[serde(default, deserialize_with = "wait_ms")]
    #[schemars(range(min = LEAST_WAIT_MS))]
    wait_ms: Option<u64>,
    /// Instead of code: look at cell N, which was still running when its call answered.
    /// Returns its new output, and its outcome once it has ended.
    #[serde(default, deserialize_with = "cell_to_look_at")]
    #[schemars(range(min = FIRST_CELL))]
    cell: Option<u64>,
    /// With cell: stop that cell (KeyboardInterrupt; killed if it ignores it).
    #[serde(default, deserialize_with = "interrupt")]
    interrupt: Option<bool>,
    /// Instead of code: return the workspace's variables to their state right after cell N was
    /// answered (later bindings removed, values as they were). Runs as a cell of its own; files
    /// are not rewound.
    #[serde(default, deserialize_with = "cell_to_rewind_to")]
    #[schemars(range(min = FIRST_CELL))]
    rewind: Option<u64>,
}

/// What one `execute` call asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// Run new code.
    Run {
        code: String,
        timeout_ms: Option<u64>,
    },
    /// Look at cell `cell` again (it may still run): its new output, its outcome once ended;
    /// with `interrupt`, abort it first.
    Look { cell: u64, interrupt: bool },
    /// Return the workspace to its state right after answered cell `to` (`docs/rewind.md`).
    Rewind { to: u64 },
}

/// The arguments of one `execute` call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecuteArgs {
    pub request: Request,
    /// How long this call waits before answering with what it has (`None`: the server's
    /// default).
    pub wait_ms: Option<u64>,
}

/// The input schema `tools/list` serves, generated from `ExecuteArguments` once.
pub fn input_schema() -> Arc<JsonObject> {
    static SCHEMA: LazyLock<Arc<JsonObject>> = LazyLock::new(|| Arc::new(generate_schema()));
    SCHEMA.clone()
}

/// `ExecuteArguments`' schema as a plain object schema: inlined, with no `$schema`, `$defs` or
/// `title` for a client to trip on (nor the struct's doc, which is for developers), and each
/// property as a model reads it best (one type, not `[T, "null"]`; no Rust `format` such as
/// `uint64`; its description on one line).
fn generate_schema() -> JsonObject {
    let generator = SchemaSettings::draft2020_12()
        .with(|settings| {
            settings.meta_schema = None;
            settings.inline_subschemas = true;
        })
        .into_generator();
    let mut schema: Schema = generator.into_root_schema_for::<ExecuteArguments>();
    for noise in ["$schema", "$defs", "title", "description"] {
        schema.remove(noise);
    }
    if let Some(Value::Object(properties)) = schema.get_mut("properties") {
        for property in properties.values_mut() {
            if let Value::Object(property) = property {
                plain_property(property);
            }
        }
    }
    match schema.to_value() {
        Value::Object(object) => object,
        other => unreachable!("a struct's schema is an object, not {other}"),
    }
}

/// One property as the model reads it: `null` is accepted as absent without being announced
/// (neither as a type nor as the `default` schemars writes for a `#[serde(default)]` field), a
/// Rust `format` says nothing to a client, and a doc comment's line breaks are only wrapping.
fn plain_property(property: &mut JsonObject) {
    property.remove("format");
    if property.get("default") == Some(&Value::Null) {
        property.remove("default");
    }
    if let Some(Value::Array(types)) = property.get("type") {
        let named: Vec<&Value> = types.iter().filter(|t| *t != "null").collect();
        if let [only] = named[..] {
            let only = only.clone();
            property.insert("type".into(), only);
        }
    }
    if let Some(Value::String(description)) = property.get_mut("description") {
        *description = description.replace('\n', " ");
    }
}

/// Reads the arguments, with a message for the model when they are malformed.
pub fn parse_args(arguments: Option<&JsonObject>) -> Result<ExecuteArgs, String> {
    let Some(arguments) = arguments else {
        return Err("`execute` needs arguments: {\"code\": \"...\"}".to_string());
    };
    // Before serde, for a message that says what the tool takes (`deny_unknown_fields` would
    // only list the names): the schema's properties are the struct's fields.
    let schema = input_schema();
    let known = |key: &str| {
        schema
            .get("properties")
            .and_then(Value::as_object)
            .is_some_and(|properties| properties.contains_key(key))
    };
    if let Some(unknown) = arguments.keys().find(|key| !known(key)) {
        return Err(format!(
            "unknown argument `{unknown}`; `execute` takes `code` (optionally `timeout_ms`, \
             `wait_ms`), `cell` (optionally `interrupt`, `wait_ms`), or `rewind` (optionally \
             `wait_ms`)"
        ));
    }
    let arguments = ExecuteArguments::deserialize(arguments).map_err(|error| error.to_string())?;
    arguments.into_request()
}

impl ExecuteArguments {
    /// Which of `code`, `cell` and `rewind` the call asks for, and what goes with each.
    fn into_request(self) -> Result<ExecuteArgs, String> {
        let ExecuteArguments {
            code,
            timeout_ms,
            wait_ms,
            cell,
            interrupt,
            rewind,
        } = self;
        if let Some(to) = rewind {
            let other = [
                ("code", code.is_some()),
                ("cell", cell.is_some()),
                ("timeout_ms", timeout_ms.is_some()),
                ("interrupt", interrupt.is_some()),
            ]
            .into_iter()
            .find_map(|(key, present)| present.then_some(key));
            if let Some(other) = other {
                return Err(format!(
                    "`rewind` goes alone (or with `wait_ms`), not with `{other}`: \
                     {{\"rewind\": N}} returns the workspace to its state after cell N"
                ));
            }
            return Ok(ExecuteArgs {
                request: Request::Rewind { to },
                wait_ms,
            });
        }
        let request = match (code, cell) {
            (Some(_), Some(_)) => {
                return Err(
                    "give either `code` (run new code) or `cell` (look at a cell that is \
                     still running), not both"
                        .to_string(),
                );
            }
            (None, None) => return Err("`code` is required".to_string()),
            (Some(code), None) => {
                if interrupt.is_some() {
                    return Err(
                        "`interrupt` goes with `cell`: {\"cell\": N, \"interrupt\": true}"
                            .to_string(),
                    );
                }
                Request::Run { code, timeout_ms }
            }
            (None, Some(cell)) => {
                if timeout_ms.is_some() {
                    return Err("`timeout_ms` bounds new code; to stop a running cell use \
                                {\"cell\": N, \"interrupt\": true}"
                        .to_string());
                }
                Request::Look {
                    cell,
                    interrupt: interrupt.unwrap_or(false),
                }
            }
        };
        Ok(ExecuteArgs { request, wait_ms })
    }
}

fn python_code<'de, D: Deserializer<'de>>(field: D) -> Result<Option<String>, D::Error> {
    Option::<String>::deserialize(field)
        .map_err(|_| D::Error::custom("`code` must be a string of Python"))
}

fn timeout_ms<'de, D: Deserializer<'de>>(field: D) -> Result<Option<u64>, D::Error> {
    whole_at_least(field, LEAST_TIMEOUT_MS, |got| {
        format!("`timeout_ms` must be a whole, positive number of milliseconds (got {got})")
    })
}

fn wait_ms<'de, D: Deserializer<'de>>(field: D) -> Result<Option<u64>, D::Error> {
    whole_at_least(field, LEAST_WAIT_MS, |got| {
        format!("`wait_ms` must be a whole, non-negative number of milliseconds (got {got})")
    })
}

fn cell_to_look_at<'de, D: Deserializer<'de>>(field: D) -> Result<Option<u64>, D::Error> {
    whole_at_least(field, FIRST_CELL, |got| {
        format!("`cell` must be a cell number, as given in a result (got {got})")
    })
}

fn cell_to_rewind_to<'de, D: Deserializer<'de>>(field: D) -> Result<Option<u64>, D::Error> {
    whole_at_least(field, FIRST_CELL, |got| {
        format!("`rewind` must be the number of an answered cell, as given in a result (got {got})")
    })
}

fn interrupt<'de, D: Deserializer<'de>>(field: D) -> Result<Option<bool>, D::Error> {
    match Option::<Value>::deserialize(field)? {
        None => Ok(None),
        Some(Value::Bool(interrupt)) => Ok(Some(interrupt)),
        Some(other) => Err(D::Error::custom(format!(
            "`interrupt` must be true or false (got {other})"
        ))),
    }
}

/// A whole number at least `least`, or `refused`'s message naming what came.
fn whole_at_least<'de, D: Deserializer<'de>>(
    field: D,
    least: u64,
    refused: impl FnOnce(&Value) -> String,
) -> Result<Option<u64>, D::Error> {
    let Some(value) = Option::<Value>::deserialize(field)? else {
        return Ok(None);
    };
    match whole_number(&value) {
        Some(number) if number >= least => Ok(Some(number)),
        _ => Err(D::Error::custom(refused(&value))),
    }
}

fn whole_number(value: &Value) -> Option<u64> {
    value.as_u64().or_else(|| {
        value
            .as_f64()
            .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f <= u64::MAX as f64)
            .map(|f| f as u64)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(value: Value) -> JsonObject {
        match value {
            Value::Object(map) => map,
            _ => panic!("not an object"),
        }
    }

    #[test]
    fn arguments_are_checked_with_messages_for_the_model() {
        assert_eq!(
            parse_args(Some(&object(json!({"code": "1"})))),
            Ok(ExecuteArgs {
                request: Request::Run {
                    code: "1".into(),
                    timeout_ms: None
                },
                wait_ms: None
            })
        );
        assert_eq!(
            parse_args(Some(&object(json!({"code": "1", "timeout_ms": 500})))),
            Ok(ExecuteArgs {
                request: Request::Run {
                    code: "1".into(),
                    timeout_ms: Some(500)
                },
                wait_ms: None
            })
        );
        assert!(parse_args(None).unwrap_err().contains("needs arguments"));
        assert!(
            parse_args(Some(&object(json!({"code": 5}))))
                .unwrap_err()
                .contains("must be a string")
        );
        assert!(
            parse_args(Some(&object(json!({"cmd": "1"}))))
                .unwrap_err()
                .contains("unknown argument `cmd`")
        );
        assert!(parse_args(Some(&object(json!({"code": "1", "timeout_ms": -3})))).is_err());
        assert!(
            parse_args(Some(&object(json!({"code": "1", "timeout_ms": 1.5}))))
                .unwrap_err()
                .contains("whole")
        );
        assert_eq!(
            parse_args(Some(&object(json!({"code": "1", "timeout_ms": 5000.0})))),
            Ok(ExecuteArgs {
                request: Request::Run {
                    code: "1".into(),
                    timeout_ms: Some(5000)
                },
                wait_ms: None
            })
        );
    }

    #[test]
    fn a_rewind_takes_an_answered_cell_and_optionally_wait_ms() {
        assert_eq!(
            parse_args(Some(&object(json!({"rewind": 3, "wait_ms": 10})))),
            Ok(ExecuteArgs {
                request: Request::Rewind { to: 3 },
                wait_ms: Some(10)
            })
        );
    }

    #[test]
    fn a_look_at_a_cell_takes_its_number_and_optionally_interrupt_and_wait_ms() {
        assert_eq!(
            parse_args(Some(&object(
                json!({"cell": 7, "interrupt": true, "wait_ms": 0})
            ))),
            Ok(ExecuteArgs {
                request: Request::Look {
                    cell: 7,
                    interrupt: true
                },
                wait_ms: Some(0)
            })
        );
        assert_eq!(
            parse_args(Some(&object(json!({"code": "1", "wait_ms": 1000.0}))))
                .unwrap()
                .wait_ms,
            Some(1000)
        );
        let refused = |args: Value| parse_args(Some(&object(args))).unwrap_err();
        assert!(refused(json!({"code": "1", "cell": 2})).contains("not both"));
        assert!(refused(json!({"rewind": 2, "code": "1"})).contains("alone"));
        assert!(refused(json!({"rewind": 0})).contains("answered cell"));
        assert!(refused(json!({"code": "1", "interrupt": true})).contains("goes with `cell`"));
        assert!(refused(json!({"cell": 0})).contains("cell number"));
        assert!(refused(json!({"cell": "3"})).contains("cell number"));
        assert!(refused(json!({"cell": 3, "timeout_ms": 5})).contains("interrupt"));
        assert!(refused(json!({"cell": 3, "interrupt": "yes"})).contains("true or false"));
        assert!(refused(json!({"code": "1", "wait_ms": -1})).contains("non-negative"));
        assert!(refused(json!({"code": "1", "wait_ms": 2.5})).contains("whole"));
    }

    /// The schema is generated from `ExecuteArguments`, and parsing goes through it: a field
    /// added, renamed or dropped changes both. The struct's fields as serde reads them are the
    /// ones its refusal of an unknown field lists.
    #[test]
    fn the_schemas_properties_are_the_structs_fields() {
        let refusal = ExecuteArguments::deserialize(&object(json!({"unknown": 1})))
            .unwrap_err()
            .to_string();
        let (_, listed) = refusal.split_once("expected one of ").unwrap();
        let mut fields: Vec<&str> = listed.split(", ").map(|f| f.trim_matches('`')).collect();
        fields.sort();
        let schema = input_schema();
        let properties: Vec<&str> = schema["properties"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(properties, fields, "{refusal}");
        assert_eq!(fields.len(), 6);
    }

    /// What the model and its client see: the schema hand-written before it was generated,
    /// word for word. A plain object schema (Claude Code and Codex take it as it is): no
    /// `$schema`, `$defs` or `title`, no `required` (code, or cell, or rewind), one type per
    /// property, no `format`.
    #[test]
    fn the_schema_is_the_plain_object_schema_clients_were_given() {
        let expected = json!({
            "type": "object",
            "properties": {
                "code": {
                    "type": "string",
                    "description": "Python code to run in the workspace, like one notebook cell."
                },
                "timeout_ms": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "Abort the cell (KeyboardInterrupt) if it runs longer than this many milliseconds."
                },
                "wait_ms": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "How long this call waits for the cell before answering with its output so far; the cell keeps running either way."
                },
                "cell": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "Instead of code: look at cell N, which was still running when its call answered. Returns its new output, and its outcome once it has ended."
                },
                "interrupt": {
                    "type": "boolean",
                    "description": "With cell: stop that cell (KeyboardInterrupt; killed if it ignores it)."
                },
                "rewind": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "Instead of code: return the workspace's variables to their state right after cell N was answered (later bindings removed, values as they were). Runs as a cell of its own; files are not rewound."
                }
            },
            "additionalProperties": false
        });
        assert_eq!(Value::Object((*input_schema()).clone()), expected);
    }

    /// Each integer's `minimum` in the schema is what the parser enforces: the least value is
    /// taken, one less is refused.
    #[test]
    fn the_schemas_minimums_are_what_the_parser_enforces() {
        let schema = input_schema();
        let mut checked = Vec::new();
        for (name, property) in schema["properties"].as_object().unwrap() {
            let Some(least) = property.get("minimum").and_then(Value::as_i64) else {
                continue;
            };
            // `cell` and `rewind` go alone; the others go with code.
            let call = |value: i64| {
                let mut call = object(json!({ name: value }));
                if !["cell", "rewind"].contains(&name.as_str()) {
                    call.insert("code".into(), json!("1"));
                }
                parse_args(Some(&call))
            };
            assert!(call(least).is_ok(), "{name}: {least} is taken");
            let refused = call(least - 1).unwrap_err();
            assert!(refused.contains(&format!("`{name}`")), "{name}: {refused}");
            checked.push(name.as_str());
        }
        assert_eq!(checked, ["cell", "rewind", "timeout_ms", "wait_ms"]);
    }

    #[test]
    fn null_reads_as_absent() {
        assert_eq!(
            parse_args(Some(&object(json!({
                "code": "1", "timeout_ms": null, "wait_ms": null, "cell": null,
                "interrupt": null, "rewind": null
            })))),
            Ok(ExecuteArgs {
                request: Request::Run {
                    code: "1".into(),
                    timeout_ms: None
                },
                wait_ms: None
            })
        );
        assert_eq!(
            parse_args(Some(&object(json!({"code": null})))),
            Err("`code` is required".to_string())
        );
    }
}
