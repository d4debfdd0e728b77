//! An insertion-ordered JSON value and a writer that reproduces Python's
//! `json.dumps(value, indent=2)` byte for byte (MITuna writes fin's input file that way).
//!
//! Why not `serde_json`: its `Map` sorts keys unless the `preserve_order` feature is on, and that
//! feature would change key order for every crate in the workspace. fin itself does not care
//! about key order, but "exactly as MITuna writes it" does.

use serde_json::Value;
use std::fmt::Write;

#[derive(Clone, Debug, PartialEq)]
pub(crate) enum PyJson {
    Bool(bool),
    Int(i64),
    Str(String),
    Arr(Vec<PyJson>),
    Obj(Vec<(String, PyJson)>),
}

impl PyJson {
    pub fn obj() -> PyJson {
        PyJson::Obj(Vec::new())
    }

    /// Appends `key: value` to an object (no-op on other variants, which callers never build).
    pub fn push(&mut self, key: &str, value: impl Into<PyJson>) {
        if let PyJson::Obj(items) = self {
            items.push((key.to_string(), value.into()));
        }
    }

    pub fn to_value(&self) -> Value {
        match self {
            PyJson::Bool(b) => Value::Bool(*b),
            PyJson::Int(i) => Value::from(*i),
            PyJson::Str(s) => Value::from(s.as_str()),
            PyJson::Arr(items) => Value::Array(items.iter().map(PyJson::to_value).collect()),
            PyJson::Obj(items) => Value::Object(
                items
                    .iter()
                    .map(|(k, v)| (k.clone(), v.to_value()))
                    .collect(),
            ),
        }
    }

    /// `json.dumps(self, indent=2)` (no trailing newline, as Python writes it).
    pub fn dumps_indent2(&self) -> String {
        let mut out = String::new();
        self.write(&mut out, 0);
        out
    }

    fn write(&self, out: &mut String, level: usize) {
        match self {
            PyJson::Bool(true) => out.push_str("true"),
            PyJson::Bool(false) => out.push_str("false"),
            PyJson::Int(i) => {
                let _ = write!(out, "{i}");
            }
            PyJson::Str(s) => write_py_string(out, s),
            PyJson::Arr(items) if items.is_empty() => out.push_str("[]"),
            PyJson::Obj(items) if items.is_empty() => out.push_str("{}"),
            PyJson::Arr(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    newline_indent(out, level + 1);
                    item.write(out, level + 1);
                }
                newline_indent(out, level);
                out.push(']');
            }
            PyJson::Obj(items) => {
                out.push('{');
                for (i, (k, v)) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    newline_indent(out, level + 1);
                    write_py_string(out, k);
                    out.push_str(": ");
                    v.write(out, level + 1);
                }
                newline_indent(out, level);
                out.push('}');
            }
        }
    }
}

fn newline_indent(out: &mut String, level: usize) {
    out.push('\n');
    for _ in 0..level {
        out.push_str("  ");
    }
}

/// Python's `ensure_ascii=True` string encoding: `\"`, `\\`, `\n`, `\r`, `\t`, `\b`, `\f`, other
/// control and all non-ASCII characters as `\uXXXX` (UTF-16 surrogate pairs above U+FFFF).
fn write_py_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (c as u32) > 0x7e => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

impl From<bool> for PyJson {
    fn from(b: bool) -> Self {
        PyJson::Bool(b)
    }
}
impl From<i64> for PyJson {
    fn from(i: i64) -> Self {
        PyJson::Int(i)
    }
}
impl From<u32> for PyJson {
    fn from(i: u32) -> Self {
        PyJson::Int(i64::from(i))
    }
}
impl From<u64> for PyJson {
    fn from(i: u64) -> Self {
        PyJson::Int(i as i64)
    }
}
impl From<&str> for PyJson {
    fn from(s: &str) -> Self {
        PyJson::Str(s.to_string())
    }
}
impl From<String> for PyJson {
    fn from(s: String) -> Self {
        PyJson::Str(s)
    }
}
impl From<Vec<PyJson>> for PyJson {
    fn from(items: Vec<PyJson>) -> Self {
        PyJson::Arr(items)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_python_indent2() {
        // Expected text from python3: json.dumps([{'a': [], 'b': {}, 'c': [1, {'x': False}],
        // 'd': 'é\n"', 'e': True}], indent=2)
        let mut o = PyJson::obj();
        o.push("a", PyJson::Arr(vec![]));
        o.push("b", PyJson::obj());
        let mut x = PyJson::obj();
        x.push("x", false);
        o.push("c", PyJson::Arr(vec![PyJson::Int(1), x]));
        o.push("d", "é\n\"");
        o.push("e", true);
        let text = PyJson::Arr(vec![o]).dumps_indent2();
        let expected = "[\n  {\n    \"a\": [],\n    \"b\": {},\n    \"c\": [\n      1,\n      {\n        \"x\": false\n      }\n    ],\n    \"d\": \"\\u00e9\\n\\\"\",\n    \"e\": true\n  }\n]";
        assert_eq!(text, expected);
    }
}
