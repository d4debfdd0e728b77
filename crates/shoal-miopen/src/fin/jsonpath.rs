//! A cursor over a `serde_json::Value` that remembers its JSON path, so that every parse error
//! says exactly where it happened (`$[1].miopen_perf_eval_result[0].time: expected a number`).
//!
//! Lenient where fin's recorded outputs are: older fins wrote some numbers as strings
//! (`"time": "1.651320"`, `"workspace": "0"`), and a JSON `null` is treated like a missing key
//! (nlohmann echoes missing job keys as `null`).

use super::FinError;
use serde_json::{Map, Value};

#[derive(Clone)]
pub(crate) struct At<'a> {
    pub v: &'a Value,
    pub path: String,
}

impl<'a> At<'a> {
    pub fn root(v: &'a Value) -> At<'a> {
        At {
            v,
            path: "$".to_string(),
        }
    }

    pub fn err(&self, message: impl Into<String>) -> FinError {
        FinError::Shape {
            path: self.path.clone(),
            message: message.into(),
        }
    }

    fn kind(&self) -> &'static str {
        match self.v {
            Value::Null => "null",
            Value::Bool(_) => "a bool",
            Value::Number(_) => "a number",
            Value::String(_) => "a string",
            Value::Array(_) => "an array",
            Value::Object(_) => "an object",
        }
    }

    fn expected(&self, what: &str) -> FinError {
        self.err(format!("expected {what}, found {}", self.kind()))
    }

    pub fn obj(&self) -> Result<&'a Map<String, Value>, FinError> {
        self.v.as_object().ok_or_else(|| self.expected("an object"))
    }

    pub fn arr(&self) -> Result<Vec<At<'a>>, FinError> {
        let items = self.v.as_array().ok_or_else(|| self.expected("an array"))?;
        Ok(items
            .iter()
            .enumerate()
            .map(|(i, v)| At {
                v,
                path: format!("{}[{i}]", self.path),
            })
            .collect())
    }

    /// The value under `key`; `None` when the key is missing or `null`.
    pub fn get(&self, key: &str) -> Result<Option<At<'a>>, FinError> {
        let map = self.obj()?;
        Ok(map.get(key).filter(|v| !v.is_null()).map(|v| At {
            v,
            path: format!("{}.{key}", self.path),
        }))
    }

    pub fn req(&self, key: &str) -> Result<At<'a>, FinError> {
        self.get(key)?
            .ok_or_else(|| self.err(format!("missing key `{key}`")))
    }

    pub fn str(&self) -> Result<&'a str, FinError> {
        self.v.as_str().ok_or_else(|| self.expected("a string"))
    }

    pub fn bool(&self) -> Result<bool, FinError> {
        match self.v {
            Value::Bool(b) => Ok(*b),
            Value::Number(n) if n.as_i64() == Some(0) => Ok(false),
            Value::Number(n) if n.as_i64() == Some(1) => Ok(true),
            Value::String(s) if s == "true" || s == "1" => Ok(true),
            Value::String(s) if s == "false" || s == "0" => Ok(false),
            _ => Err(self.expected("a bool")),
        }
    }

    pub fn i64(&self) -> Result<i64, FinError> {
        match self.v {
            Value::Number(n) => n.as_i64().ok_or_else(|| self.expected("an integer")),
            Value::String(s) => s
                .trim()
                .parse()
                .map_err(|_| self.err(format!("expected an integer, found string {s:?}"))),
            _ => Err(self.expected("an integer")),
        }
    }

    pub fn u64(&self) -> Result<u64, FinError> {
        match self.v {
            Value::Number(n) => n
                .as_u64()
                .ok_or_else(|| self.expected("a non-negative integer")),
            Value::String(s) => s.trim().parse().map_err(|_| {
                self.err(format!(
                    "expected a non-negative integer, found string {s:?}"
                ))
            }),
            _ => Err(self.expected("a non-negative integer")),
        }
    }

    pub fn f64(&self) -> Result<f64, FinError> {
        match self.v {
            Value::Number(n) => n.as_f64().ok_or_else(|| self.expected("a number")),
            Value::String(s) => s
                .trim()
                .parse()
                .map_err(|_| self.err(format!("expected a number, found string {s:?}"))),
            _ => Err(self.expected("a number")),
        }
    }

    pub fn req_str(&self, key: &str) -> Result<String, FinError> {
        Ok(self.req(key)?.str()?.to_string())
    }

    pub fn opt_str(&self, key: &str) -> Result<Option<String>, FinError> {
        self.get(key)?
            .map(|a| a.str().map(str::to_string))
            .transpose()
    }

    pub fn opt_bool(&self, key: &str) -> Result<Option<bool>, FinError> {
        self.get(key)?.map(|a| a.bool()).transpose()
    }

    pub fn opt_i64(&self, key: &str) -> Result<Option<i64>, FinError> {
        self.get(key)?.map(|a| a.i64()).transpose()
    }

    pub fn opt_u64(&self, key: &str) -> Result<Option<u64>, FinError> {
        self.get(key)?.map(|a| a.u64()).transpose()
    }

    pub fn opt_f64(&self, key: &str) -> Result<Option<f64>, FinError> {
        self.get(key)?.map(|a| a.f64()).transpose()
    }

    /// An optional array of strings.
    pub fn opt_strings(&self, key: &str) -> Result<Option<Vec<String>>, FinError> {
        self.get(key)?
            .map(|a| {
                a.arr()?
                    .iter()
                    .map(|s| s.str().map(str::to_string))
                    .collect()
            })
            .transpose()
    }
}
