//! `openapi.yaml`, loaded for the tests that hold it to the code: YAML into
//! JSON, `$ref` resolution, and every operation in the document.

use serde_json::{Map, Value};
use yaml_rust2::{Yaml, YamlLoader};

pub const ROOT: &str = env!("CARGO_MANIFEST_DIR");

pub fn spec() -> Value {
    let text = std::fs::read_to_string(format!("{ROOT}/openapi.yaml")).expect("openapi.yaml");
    let mut docs = YamlLoader::load_from_str(&text).expect("openapi.yaml is valid YAML");
    assert_eq!(docs.len(), 1, "one YAML document");
    to_json(&docs.remove(0))
}

/// YAML into JSON; OpenAPI is JSON in YAML's clothes, so anything that has no
/// JSON form (an alias, a non-scalar key) is an error here.
pub fn to_json(yaml: &Yaml) -> Value {
    match yaml {
        Yaml::Null => Value::Null,
        Yaml::Boolean(b) => Value::Bool(*b),
        Yaml::Integer(i) => Value::from(*i),
        Yaml::Real(text) => Value::from(text.parse::<f64>().expect("a YAML float")),
        Yaml::String(s) => Value::String(s.clone()),
        Yaml::Array(items) => Value::Array(items.iter().map(to_json).collect()),
        Yaml::Hash(hash) => {
            let mut map = Map::new();
            for (key, value) in hash {
                let key = match key {
                    Yaml::String(s) => s.clone(),
                    Yaml::Integer(i) => i.to_string(),
                    other => panic!("a mapping key that is not a string: {other:?}"),
                };
                map.insert(key, to_json(value));
            }
            Value::Object(map)
        }
        Yaml::Alias(_) | Yaml::BadValue => panic!("YAML without a JSON form: {yaml:?}"),
    }
}

/// `#/a/b~1c` → the value there (RFC 6901 escapes).
pub fn resolve<'a>(spec: &'a Value, reference: &str) -> Option<&'a Value> {
    let pointer = reference.strip_prefix('#')?;
    spec.pointer(pointer)
}

/// A `$ref` object replaced by what it points to (once; refs here never chain).
pub fn deref<'a>(spec: &'a Value, value: &'a Value) -> &'a Value {
    match value.get("$ref").and_then(Value::as_str) {
        Some(reference) => {
            resolve(spec, reference).unwrap_or_else(|| panic!("{reference} does not resolve"))
        }
        None => value,
    }
}

pub const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

/// Every (path, method, operation) in the document.
pub fn operations(spec: &Value) -> Vec<(String, String, &Value)> {
    let paths = spec["paths"].as_object().expect("paths");
    let mut out = Vec::new();
    for (path, item) in paths {
        for (method, operation) in item.as_object().expect("a path item") {
            if METHODS.contains(&method.as_str()) {
                out.push((path.clone(), method.clone(), operation));
            }
        }
    }
    out
}
