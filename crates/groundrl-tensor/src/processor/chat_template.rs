//! Chat templates rendered as HF transformers renders them, and groundrl's own Qwen2.5-VL template.
//!
//! HF renders with jinja2 (`trim_blocks`, `lstrip_blocks`, loop controls, `raise_exception`, a
//! `tojson` that is Python's `json.dumps`) and Python objects (string methods, dict key order,
//! `None`/`True` printed the Python way). The renderer here is minijinja set up to give the same
//! text: pycompat for the methods, maps that keep their key order, Python's `json.dumps` and
//! printing rules. The chat goldens check it against HF token for token.
//!
//! Not provided: HF's `strftime_now` global and `{% generation %}` tag (assistant masks), which
//! Qwen templates do not use; a template calling them fails with a render or syntax error.

use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;

use groundrl_score::data::{Content, Message};
use minijinja::syntax::SyntaxConfig;
use minijinja::value::{Enumerator, Kwargs, Object, ObjectRepr, Value as JinjaValue, ValueKind};
use minijinja::{Environment, Error, ErrorKind, Output, State};
use serde_json::{Map, Value, json};

use super::tokenizer::{
    ENDOFTEXT, IM_END, TOKENIZER_CONFIG_FILE, TokenizerConfig, TokenizerError, read_text,
};

/// groundrl's chat template in the Qwen2.5-VL format; the `tiny` preset ships it.
pub const QWEN2_5_VL_TEMPLATE: &str = include_str!("../../assets/qwen2_5_vl_chat_template.jinja");

/// The template file HF reads first (both tokenizer and processor, in transformers 5.x).
pub const CHAT_TEMPLATE_JINJA_FILE: &str = "chat_template.jinja";
/// The processor's legacy template file (`{"chat_template": "..."}`), which Qwen2.5-VL ships.
pub const CHAT_TEMPLATE_JSON_FILE: &str = "chat_template.json";

const TEMPLATE_NAME: &str = "chat_template";

#[derive(Debug, thiserror::Error)]
pub enum ChatTemplateError {
    #[error("the chat template does not compile: {0}")]
    Syntax(String),
    #[error("the chat template failed: {0}")]
    Render(String),
    #[error(transparent)]
    File(#[from] TokenizerError),
    #[error(
        "{0} has no chat template (looked for chat_template.jinja, chat_template.json, tokenizer_config.json)"
    )]
    Missing(String),
    #[error("{file}: {message}")]
    Invalid { file: String, message: String },
}

/// What a render gets besides the messages (HF's `apply_chat_template` arguments).
#[derive(Clone, Debug, Default)]
pub struct RenderOptions {
    /// End with the opening of an assistant turn, for generation.
    pub add_generation_prompt: bool,
    /// Tool schemas (`{"type": "function", "function": {...}}`); `None` renders as HF's `None`.
    pub tools: Option<Vec<Value>>,
    /// Any other template variable (e.g. `add_vision_id`); overrides the special tokens.
    pub kwargs: Map<String, Value>,
}

/// A compiled chat template with the special tokens HF passes to it (`eos_token`, ...).
#[derive(Debug)]
pub struct ChatTemplate {
    env: Environment<'static>,
    special_tokens: Vec<(&'static str, String)>,
}

impl ChatTemplate {
    /// Compiles a template; syntax errors are reported with their line.
    pub fn new(source: &str) -> Result<Self, ChatTemplateError> {
        let mut env = Environment::new();
        let syntax = SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build();
        env.set_syntax(syntax.map_err(|e| ChatTemplateError::Syntax(describe(&e)))?);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.set_formatter(python_formatter);
        env.add_filter("tojson", tojson);
        env.add_function("raise_exception", raise_exception);
        env.add_template_owned(TEMPLATE_NAME, source.to_owned())
            .map_err(|e| ChatTemplateError::Syntax(describe(&e)))?;
        Ok(Self {
            env,
            special_tokens: Vec::new(),
        })
    }

    /// groundrl's Qwen2.5-VL template with Qwen2.5-VL's special tokens.
    pub fn qwen2_5_vl() -> Self {
        let template = Self::new(QWEN2_5_VL_TEMPLATE).expect("the built-in template compiles (tested)");
        template.with_special_tokens(vec![
            ("eos_token", IM_END.into()),
            ("pad_token", ENDOFTEXT.into()),
        ])
    }

    /// The template of a checkpoint folder: chat_template.jinja, else the processor's
    /// chat_template.json, else tokenizer_config.json's `chat_template` (a string, or a list of
    /// named templates of which the one named `default`), with the config's special tokens.
    pub fn from_folder(dir: &Path) -> Result<Self, ChatTemplateError> {
        let config = TokenizerConfig::read(dir)?;
        let source = find_template(dir, &config)?
            .ok_or_else(|| ChatTemplateError::Missing(dir.display().to_string()))?;
        Ok(Self::new(&source)?.with_special_tokens(config.special_tokens_map()))
    }

    /// Sets the special tokens templates see as variables (HF's `special_tokens_map`).
    pub fn with_special_tokens(mut self, special_tokens: Vec<(&'static str, String)>) -> Self {
        self.special_tokens = special_tokens;
        self
    }

    /// Renders HF-shaped messages (`{"role": ..., "content": "..." | [{"type": "text", ...}]}`).
    pub fn render(&self, messages: &[Value], options: &RenderOptions) -> Result<String, ChatTemplateError> {
        let mut context: Vec<(String, JinjaValue)> = Vec::new();
        for (name, token) in &self.special_tokens {
            context.push((name.to_string(), JinjaValue::from(token.as_str())));
        }
        for (name, value) in &options.kwargs {
            context.push((name.clone(), to_jinja(value)));
        }
        let tools = options
            .tools
            .as_ref()
            .map(|tools| to_jinja(&Value::Array(tools.clone())));
        context.push(("messages".into(), to_jinja(&Value::Array(messages.to_vec()))));
        context.push(("tools".into(), tools.unwrap_or(JinjaValue::from(()))));
        context.push(("documents".into(), JinjaValue::from(())));
        context.push((
            "add_generation_prompt".into(),
            JinjaValue::from(options.add_generation_prompt),
        ));
        let template = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| ChatTemplateError::Render(describe(&e)))?;
        let context = JinjaValue::from_pairs(context);
        template
            .render(context)
            .map_err(|e| ChatTemplateError::Render(describe(&e)))
    }
}

/// Our messages as HF-shaped JSON: text items as `{"type": "text", "text": ...}`, images as
/// `{"type": "image"}` (their order in the chat is their order in the sample's images).
pub fn messages_to_json(messages: &[Message]) -> Vec<Value> {
    let item = |content: &Content| match content {
        Content::Text { text } => json!({"type": "text", "text": text}),
        Content::Image { .. } => json!({"type": "image"}),
    };
    let message =
        |m: &Message| json!({"role": m.role, "content": m.content.iter().map(item).collect::<Vec<_>>()});
    messages.iter().map(message).collect()
}

fn find_template(dir: &Path, config: &TokenizerConfig) -> Result<Option<String>, ChatTemplateError> {
    let jinja = dir.join(CHAT_TEMPLATE_JINJA_FILE);
    if jinja.exists() {
        return Ok(Some(read_text(&jinja)?));
    }
    let legacy = dir.join(CHAT_TEMPLATE_JSON_FILE);
    if legacy.exists() {
        let invalid = |message: &str| ChatTemplateError::Invalid {
            file: legacy.display().to_string(),
            message: message.to_owned(),
        };
        let json: Value = serde_json::from_str(&read_text(&legacy)?).map_err(|e| invalid(&e.to_string()))?;
        let source = json.get("chat_template").and_then(Value::as_str);
        return source
            .map(|s| Some(s.to_owned()))
            .ok_or_else(|| invalid("no \"chat_template\" string"));
    }
    match config.0.get("chat_template") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(source)) => Ok(Some(source.clone())),
        Some(Value::Array(named)) => default_of_named(named, dir).map(Some),
        Some(_) => Err(invalid_config(
            dir,
            "\"chat_template\" is neither a string nor a list",
        )),
    }
}

/// The `default` entry of a list of `{"name": ..., "template": ...}`.
fn default_of_named(named: &[Value], dir: &Path) -> Result<String, ChatTemplateError> {
    let default = named
        .iter()
        .find(|t| t.get("name").and_then(Value::as_str) == Some("default"));
    let source = default.and_then(|t| t.get("template")).and_then(Value::as_str);
    source
        .map(str::to_owned)
        .ok_or_else(|| invalid_config(dir, "no chat template named \"default\""))
}

fn invalid_config(dir: &Path, message: &str) -> ChatTemplateError {
    let file = dir.join(TOKENIZER_CONFIG_FILE).display().to_string();
    ChatTemplateError::Invalid {
        file,
        message: message.to_owned(),
    }
}

/// An error with its causes and template location, in one line.
fn describe(error: &Error) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        let _ = write!(text, ": {cause}");
        source = cause.source();
    }
    text
}

/// HF's `raise_exception(message)`: fails the render with the template's message.
fn raise_exception(message: String) -> Result<JinjaValue, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message))
}

/// A JSON object as the template sees it: a map that keeps its key order, as Python's dict does
/// (minijinja's own maps sort their keys, which would reorder `tojson` output and `items()`).
#[derive(Debug)]
struct OrderedMap(Vec<(String, JinjaValue)>);

impl Object for OrderedMap {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Map
    }

    fn get_value(self: &Arc<Self>, key: &JinjaValue) -> Option<JinjaValue> {
        let key = key.as_str()?;
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone())
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        Enumerator::Values(self.0.iter().map(|(k, _)| JinjaValue::from(k.as_str())).collect())
    }
}

fn to_jinja(value: &Value) -> JinjaValue {
    match value {
        Value::Array(items) => items.iter().map(to_jinja).collect::<Vec<_>>().into(),
        Value::Object(map) => {
            let entries = map.iter().map(|(k, v)| (k.clone(), to_jinja(v))).collect();
            JinjaValue::from_object(OrderedMap(entries))
        }
        Value::Null => JinjaValue::from(()),
        Value::Bool(b) => JinjaValue::from(*b),
        Value::String(s) => JinjaValue::from(s.as_str()),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => JinjaValue::from(i),
            (None, Some(u)) => JinjaValue::from(u),
            _ => JinjaValue::from(n.as_f64().unwrap_or(f64::NAN)),
        },
    }
}

/// Prints values as jinja2 does with Python objects: `None`, `True`, `1.0`, `['a', 1]`.
fn python_formatter(out: &mut Output, _state: &mut State, value: &JinjaValue) -> Result<(), Error> {
    let text = match value.kind() {
        ValueKind::Undefined => String::new(),
        ValueKind::String => value.as_str().unwrap_or_default().to_owned(),
        _ => python_repr(value)?,
    };
    out.write_str(&text).map_err(Error::from)
}

/// Python's `repr` of a value (strings quoted), `str` of scalars.
fn python_repr(value: &JinjaValue) -> Result<String, Error> {
    Ok(match value.kind() {
        ValueKind::None => "None".into(),
        ValueKind::Bool => if value.is_true() { "True" } else { "False" }.into(),
        ValueKind::Number if !value.is_integer() => python_float(f64::try_from(value.clone())?, false),
        ValueKind::String => python_str_repr(value.as_str().unwrap_or_default()),
        ValueKind::Seq => format!("[{}]", join_items(value, |item| python_repr(&item))?),
        ValueKind::Map => {
            let entry = |key: JinjaValue| {
                Ok(format!(
                    "{}: {}",
                    python_repr(&key)?,
                    python_repr(&value.get_item(&key)?)?
                ))
            };
            format!("{{{}}}", join_items(value, entry)?)
        }
        _ => value.to_string(),
    })
}

fn join_items(
    value: &JinjaValue,
    each: impl Fn(JinjaValue) -> Result<String, Error>,
) -> Result<String, Error> {
    let items: Result<Vec<String>, Error> = value.try_iter()?.map(each).collect();
    Ok(items?.join(", "))
}

/// Python's string repr: single quotes unless the text has a single quote and no double one.
fn python_str_repr(text: &str) -> String {
    let quote = if text.contains('\'') && !text.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::from(quote);
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// Python's float repr (shortest round-trip digits, exponent below 1e-4 and from 1e16 on).
/// In JSON, non-finite values are written as Python's `json.dumps` writes them.
fn python_float(x: f64, json: bool) -> String {
    if !x.is_finite() {
        let name = match (x.is_nan(), x > 0.0, json) {
            (true, _, true) => "NaN",
            (true, _, false) => "nan",
            (false, true, true) => "Infinity",
            (false, true, false) => "inf",
            (false, false, true) => "-Infinity",
            (false, false, false) => "-inf",
        };
        return name.into();
    }
    let scientific = format!("{:e}", x.abs());
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let digits = mantissa.replace('.', "");
    let sign = if x.is_sign_negative() { "-" } else { "" };
    let body = if (-4..16).contains(&exponent) {
        fixed_notation(&digits, exponent)
    } else {
        let (first, rest) = digits.split_at(1);
        let mantissa = if rest.is_empty() {
            first.to_owned()
        } else {
            format!("{first}.{rest}")
        };
        format!(
            "{mantissa}e{}{:02}",
            if exponent < 0 { '-' } else { '+' },
            exponent.abs()
        )
    };
    format!("{sign}{body}")
}

/// `digits` (d.ddd) times 10^exponent without an exponent, always with a fractional part.
fn fixed_notation(digits: &str, exponent: i32) -> String {
    if exponent < 0 {
        return format!("0.{}{digits}", "0".repeat((-exponent - 1) as usize));
    }
    let integer_len = exponent as usize + 1;
    if digits.len() <= integer_len {
        format!("{digits}{}.0", "0".repeat(integer_len - digits.len()))
    } else {
        format!("{}.{}", &digits[..integer_len], &digits[integer_len..])
    }
}

/// HF's `tojson`: Python's `json.dumps(x, ensure_ascii=False, indent=None, separators=None,
/// sort_keys=False)`, with those keyword arguments.
fn tojson(value: &JinjaValue, kwargs: Kwargs) -> Result<String, Error> {
    let indent: Option<JinjaValue> = kwargs.get("indent")?;
    let separators: Option<Vec<String>> = kwargs.get("separators")?;
    let style = JsonStyle {
        indent: match indent {
            Some(v) if v.is_integer() => Some(" ".repeat(i64::try_from(v)?.max(0) as usize)),
            Some(v) if v.kind() == ValueKind::String => Some(v.as_str().unwrap_or_default().to_owned()),
            _ => None,
        },
        sort_keys: kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false),
        ensure_ascii: kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false),
        separators: (String::new(), String::new()),
    };
    let default_separators = if style.indent.is_some() {
        (",", ": ")
    } else {
        (", ", ": ")
    };
    let separators = match separators.as_deref() {
        None => (default_separators.0.into(), default_separators.1.into()),
        Some([item, key]) => (item.clone(), key.clone()),
        Some(_) => {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "tojson: separators is a pair",
            ));
        }
    };
    kwargs.assert_all_used()?;
    let style = JsonStyle { separators, ..style };
    let mut out = String::new();
    style.write(&mut out, value, 0)?;
    Ok(out)
}

struct JsonStyle {
    indent: Option<String>,
    separators: (String, String),
    sort_keys: bool,
    ensure_ascii: bool,
}

impl JsonStyle {
    fn write(&self, out: &mut String, value: &JinjaValue, depth: usize) -> Result<(), Error> {
        match value.kind() {
            ValueKind::None => out.push_str("null"),
            ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
            ValueKind::Number if value.is_integer() => out.push_str(&value.to_string()),
            ValueKind::Number => out.push_str(&python_float(f64::try_from(value.clone())?, true)),
            ValueKind::String => self.write_str(out, value.as_str().unwrap_or_default()),
            ValueKind::Seq => {
                let items: Vec<JinjaValue> = value.try_iter()?.collect();
                self.write_container(out, ('[', ']'), &items, depth, |out, item| {
                    self.write(out, item, depth + 1)
                })?
            }
            ValueKind::Map => {
                let mut keys: Vec<(String, JinjaValue)> = value
                    .try_iter()?
                    .map(|key| Ok((json_key(&key)?, key)))
                    .collect::<Result<_, Error>>()?;
                if self.sort_keys {
                    keys.sort_by(|a, b| a.0.cmp(&b.0));
                }
                self.write_container(out, ('{', '}'), &keys, depth, |out, (name, key)| {
                    self.write_str(out, name);
                    out.push_str(&self.separators.1);
                    self.write(out, &value.get_item(key)?, depth + 1)
                })?
            }
            _ => {
                let message = format!("tojson: a {} value is not JSON serializable", value.kind());
                return Err(Error::new(ErrorKind::InvalidOperation, message));
            }
        }
        Ok(())
    }

    /// Brackets around items, with Python's separators and indentation (none for empty ones).
    fn write_container<T>(
        &self,
        out: &mut String,
        (open, close): (char, char),
        items: &[T],
        depth: usize,
        mut each: impl FnMut(&mut String, &T) -> Result<(), Error>,
    ) -> Result<(), Error> {
        out.push(open);
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                out.push_str(&self.separators.0);
            }
            self.newline(out, depth + 1);
            each(out, item)?;
        }
        if !items.is_empty() {
            self.newline(out, depth);
        }
        out.push(close);
        Ok(())
    }

    fn newline(&self, out: &mut String, depth: usize) {
        if let Some(indent) = &self.indent {
            out.push('\n');
            out.push_str(&indent.repeat(depth));
        }
    }

    fn write_str(&self, out: &mut String, text: &str) {
        out.push('"');
        for c in text.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                c if (c as u32) < 0x20 || (self.ensure_ascii && !c.is_ascii()) => {
                    let mut units = [0u16; 2];
                    for unit in c.encode_utf16(&mut units) {
                        let _ = write!(out, "\\u{unit:04x}");
                    }
                }
                c => out.push(c),
            }
        }
        out.push('"');
    }
}

/// A map key as Python's `json.dumps` writes it (strings, numbers, booleans, None).
fn json_key(key: &JinjaValue) -> Result<String, Error> {
    match key.kind() {
        ValueKind::String => Ok(key.as_str().unwrap_or_default().to_owned()),
        ValueKind::Number if key.is_integer() => Ok(key.to_string()),
        ValueKind::Number => Ok(python_float(f64::try_from(key.clone())?, true)),
        ValueKind::Bool => Ok(if key.is_true() { "true" } else { "false" }.into()),
        ValueKind::None => Ok("null".into()),
        kind => Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("tojson: a {kind} key is not allowed"),
        )),
    }
}
