//! Argument schemas derived from the argument structs, in the plain shape models take.
//!
//! `schemars` describes a struct as it deserializes (`deny_unknown_fields` becomes
//! `additionalProperties: false`, `#[serde(default)]` makes a field optional, doc comments become
//! descriptions). What it adds for validators and not for models is taken out: the meta-schema
//! and titles, `null` as a second type of an optional field (leaving it out is how the model says
//! "none"), and integer formats such as `uint32`.

use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde_json::Value;

/// The JSON schema of `T`'s arguments, with every subschema inline.
pub fn schema_of<T: JsonSchema>() -> Value {
    let generator = SchemaSettings::draft2020_12()
        .with(|settings| {
            settings.meta_schema = None;
            settings.inline_subschemas = true;
        })
        .into_generator();
    let mut schema = generator.into_root_schema_for::<T>().to_value();
    if let Value::Object(root) = &mut schema {
        // The tool's own description says what the arguments are for.
        root.remove("description");
    }
    plain(&mut schema);
    schema
}

/// Removes what only validators need, in `schema` and every schema inside it.
fn plain(schema: &mut Value) {
    let Value::Object(map) = schema else { return };
    map.remove("title");
    map.remove("$schema");
    if map.get("default").is_some_and(Value::is_null) {
        map.remove("default");
    }
    if map
        .get("format")
        .and_then(Value::as_str)
        .is_some_and(|format| format.starts_with("int") || format.starts_with("uint"))
    {
        map.remove("format");
    }
    if let Some(Value::Array(types)) = map.get_mut("type") {
        types.retain(|kind| kind != "null");
        if let [only] = types.as_slice() {
            let only = only.clone();
            map.insert("type".into(), only);
        }
    }
    if let Some(Value::Array(choices)) = map.get_mut("enum") {
        choices.retain(|choice| !choice.is_null());
    }
    // An optional enum: `anyOf: [{the enum}, {"type": "null"}]` becomes the enum.
    if let Some(Value::Array(any)) = map.get("anyOf") {
        let kept: Vec<&Value> = any.iter().filter(|option| option.get("type").is_none_or(|t| t != "null")).collect();
        if let [Value::Object(only)] = kept.as_slice() {
            let only = only.clone();
            map.remove("anyOf");
            for (key, value) in only {
                map.entry(key).or_insert(value);
            }
        }
    }
    for key in ["properties", "$defs"] {
        if let Some(Value::Object(children)) = map.get_mut(key) {
            children.values_mut().for_each(plain);
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(child) = map.get_mut(key) {
            plain(child);
        }
    }
    for key in ["anyOf", "oneOf", "allOf"] {
        if let Some(Value::Array(children)) = map.get_mut(key) {
            children.iter_mut().for_each(plain);
        }
    }
}
