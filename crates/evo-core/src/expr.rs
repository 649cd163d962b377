//! Expressions over knobs, specializations and shapes, evaluated with `evalexpr`.
//!
//! Syntax is evalexpr's: integers, booleans, strings in double quotes, `+ - * / %`
//! (integer division on integers), comparisons, `&& || !`, and functions. Besides
//! evalexpr's builtins (`min`, `max`, `if(c, a, b)`, `floor`, ...) evo adds
//! `ceil_div(a, b)`, `round_up(a, b)`, `is_pow2(a)` and `log2(a)` on integers.

use std::collections::BTreeMap;
use std::fmt;

use evalexpr::{
    build_operator_tree, error::EvalexprResultValue, Context, DefaultNumericTypes, EvalexprError,
    Node,
};

use crate::value::{Value, Vars};

type EValue = evalexpr::Value<DefaultNumericTypes>;

/// Names of the functions evo adds, plus the evalexpr builtins we document.
pub const FUNCTIONS: &[&str] = &[
    "ceil_div", "round_up", "is_pow2", "log2", "min", "max", "if", "floor", "ceil", "round",
];

#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum ExprError {
    #[error("cannot parse expression `{source_text}`: {message}")]
    Parse {
        source_text: String,
        message: String,
    },
    #[error("evaluating `{source_text}`: {message}")]
    Eval {
        source_text: String,
        message: String,
    },
    #[error("`{source_text}` should give {expected}, but gave {got}")]
    Type {
        source_text: String,
        expected: &'static str,
        got: String,
    },
}

/// A parsed expression that remembers its source text.
#[derive(Clone)]
pub struct Expr {
    source: String,
    node: Node<DefaultNumericTypes>,
}

impl fmt::Debug for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Expr({:?})", self.source)
    }
}

impl PartialEq for Expr {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl Expr {
    pub fn parse(source: &str) -> Result<Expr, ExprError> {
        let node =
            build_operator_tree::<DefaultNumericTypes>(source).map_err(|e| ExprError::Parse {
                source_text: source.to_string(),
                message: e.to_string(),
            })?;
        // evalexpr accepts `a = 1` (assignment) and `a; b` (chains); neither makes sense
        // in a constraint or a launch rule, and `=` is a likely typo for `==`.
        if source.contains(';') || has_bare_assignment(source) {
            return Err(ExprError::Parse {
                source_text: source.to_string(),
                message: "assignment (`=`) and `;` are not allowed; did you mean `==`?".into(),
            });
        }
        Ok(Expr {
            source: source.to_string(),
            node,
        })
    }

    /// An expression that is just an integer literal.
    pub fn int(value: i64) -> Expr {
        Expr::parse(&value.to_string()).expect("an integer literal parses")
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// Variables the expression reads, sorted and without repeats.
    pub fn variables(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .node
            .iter_variable_identifiers()
            .map(str::to_string)
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// Functions the expression calls that are neither evo's nor evalexpr's documented ones.
    pub fn unknown_functions(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .node
            .iter_function_identifiers()
            .filter(|f| !FUNCTIONS.contains(f))
            .map(str::to_string)
            .collect();
        v.sort();
        v.dedup();
        v
    }

    pub fn eval(&self, scope: &Scope) -> Result<Value, ExprError> {
        let v = self
            .node
            .eval_with_context(scope)
            .map_err(|e| self.eval_error(e))?;
        match v {
            EValue::Int(i) => Ok(Value::Int(i)),
            EValue::Boolean(b) => Ok(Value::Bool(b)),
            EValue::String(s) => Ok(Value::Str(s)),
            other => Err(ExprError::Type {
                source_text: self.source.clone(),
                expected: "an integer, boolean or string",
                got: format!("{other:?}"),
            }),
        }
    }

    pub fn eval_int(&self, scope: &Scope) -> Result<i64, ExprError> {
        match self.eval(scope)? {
            Value::Int(i) => Ok(i),
            other => Err(self.type_error("an integer", &other)),
        }
    }

    pub fn eval_bool(&self, scope: &Scope) -> Result<bool, ExprError> {
        match self.eval(scope)? {
            Value::Bool(b) => Ok(b),
            other => Err(self.type_error("a boolean", &other)),
        }
    }

    fn type_error(&self, expected: &'static str, got: &Value) -> ExprError {
        ExprError::Type {
            source_text: self.source.clone(),
            expected,
            got: format!("{} {got}", got.kind()),
        }
    }

    fn eval_error(&self, e: EvalexprError<DefaultNumericTypes>) -> ExprError {
        ExprError::Eval {
            source_text: self.source.clone(),
            message: e.to_string(),
        }
    }
}

/// `=` that is not part of `==`, `!=`, `<=`, `>=`, outside string literals.
fn has_bare_assignment(source: &str) -> bool {
    let bytes = source.as_bytes();
    let mut in_string = false;
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'"' => in_string = !in_string,
            b'=' if !in_string => {
                let prev = i.checked_sub(1).map(|j| bytes[j]);
                let next = bytes.get(i + 1).copied();
                let part_of_op = matches!(
                    prev,
                    Some(
                        b'=' | b'!'
                            | b'<'
                            | b'>'
                            | b'+'
                            | b'-'
                            | b'*'
                            | b'/'
                            | b'%'
                            | b'^'
                            | b'&'
                            | b'|'
                    )
                ) || next == Some(b'=');
                if !part_of_op {
                    return true;
                }
            }
            _ => {}
        }
    }
    false
}

/// The variables an expression can see. Cheap to update in place, so enumerating a
/// space reuses one scope and only rewrites the knobs.
#[derive(Clone, Debug, Default)]
pub struct Scope {
    values: BTreeMap<String, EValue>,
}

impl Scope {
    pub fn new() -> Self {
        Scope::default()
    }

    pub fn from_vars(vars: &Vars) -> Self {
        let mut s = Scope::new();
        s.extend(vars);
        s
    }

    pub fn set(&mut self, name: &str, value: &Value) {
        let v = match value {
            Value::Int(i) => EValue::Int(*i),
            Value::Bool(b) => EValue::Boolean(*b),
            Value::Str(s) => EValue::String(s.clone()),
        };
        match self.values.get_mut(name) {
            Some(slot) => *slot = v,
            None => {
                self.values.insert(name.to_string(), v);
            }
        }
    }

    pub fn extend(&mut self, vars: &Vars) {
        for (k, v) in vars {
            self.set(k, v);
        }
    }

    pub fn contains(&self, name: &str) -> bool {
        self.values.contains_key(name)
    }
}

fn int_args(
    name: &str,
    argument: &EValue,
    count: usize,
) -> Result<Vec<i64>, EvalexprError<DefaultNumericTypes>> {
    let items: Vec<EValue> = match argument {
        EValue::Tuple(t) => t.clone(),
        other => vec![other.clone()],
    };
    if items.len() != count {
        return Err(EvalexprError::CustomMessage(format!(
            "{name} takes {count} integer argument(s), got {}",
            items.len()
        )));
    }
    items
        .into_iter()
        .map(|v| match v {
            EValue::Int(i) => Ok(i),
            other => Err(EvalexprError::CustomMessage(format!(
                "{name} takes integers, got {other:?}"
            ))),
        })
        .collect()
}

impl Context for Scope {
    type NumericTypes = DefaultNumericTypes;

    fn get_value(&self, identifier: &str) -> Option<&EValue> {
        self.values.get(identifier)
    }

    fn call_function(&self, identifier: &str, argument: &EValue) -> EvalexprResultValue {
        let div_check = |b: i64| {
            if b <= 0 {
                Err(EvalexprError::CustomMessage(format!(
                    "{identifier}: divisor must be positive, got {b}"
                )))
            } else {
                Ok(())
            }
        };
        match identifier {
            "ceil_div" => {
                let a = int_args(identifier, argument, 2)?;
                div_check(a[1])?;
                Ok(EValue::Int((a[0] + a[1] - 1).div_euclid(a[1])))
            }
            "round_up" => {
                let a = int_args(identifier, argument, 2)?;
                div_check(a[1])?;
                Ok(EValue::Int((a[0] + a[1] - 1).div_euclid(a[1]) * a[1]))
            }
            "is_pow2" => {
                let a = int_args(identifier, argument, 1)?;
                Ok(EValue::Boolean(a[0] > 0 && (a[0] & (a[0] - 1)) == 0))
            }
            "log2" => {
                let a = int_args(identifier, argument, 1)?;
                if a[0] <= 0 {
                    return Err(EvalexprError::CustomMessage(format!(
                        "log2 of {} is undefined",
                        a[0]
                    )));
                }
                Ok(EValue::Int(63 - a[0].leading_zeros() as i64))
            }
            _ => Err(EvalexprError::FunctionIdentifierNotFound(
                identifier.to_string(),
            )),
        }
    }

    fn are_builtin_functions_disabled(&self) -> bool {
        false
    }

    fn set_builtin_functions_disabled(
        &mut self,
        disabled: bool,
    ) -> Result<(), EvalexprError<DefaultNumericTypes>> {
        if disabled {
            Err(EvalexprError::CustomMessage(
                "evo scopes always allow builtin functions".into(),
            ))
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope() -> Scope {
        let mut vars = Vars::new();
        vars.insert("SEQ_Q".into(), Value::Int(1000));
        vars.insert("BLOCK_M".into(), Value::Int(64));
        vars.insert("SWIZZLE".into(), Value::Str("xor".into()));
        vars.insert("CAUSAL".into(), Value::Bool(true));
        Scope::from_vars(&vars)
    }

    #[test]
    fn evo_functions_and_builtins() {
        let s = scope();
        let e = |src: &str| Expr::parse(src).unwrap().eval(&s).unwrap();
        assert_eq!(e("ceil_div(SEQ_Q, BLOCK_M)"), Value::Int(16));
        assert_eq!(e("round_up(SEQ_Q, BLOCK_M)"), Value::Int(1024));
        assert_eq!(e("min(BLOCK_M, 32) + max(1, 2)"), Value::Int(34));
        assert_eq!(e("if(CAUSAL, 1, 2)"), Value::Int(1));
        assert_eq!(e("is_pow2(BLOCK_M) && !is_pow2(SEQ_Q)"), Value::Bool(true));
        assert_eq!(e("log2(BLOCK_M)"), Value::Int(6));
        assert_eq!(e("SWIZZLE == \"xor\""), Value::Bool(true));
        assert_eq!(e("7 / 2"), Value::Int(3));
    }

    #[test]
    fn variables_are_listed() {
        let e = Expr::parse("ceil_div(SEQ_Q, BLOCK_M) * HEADS + min(A, 2)").unwrap();
        assert_eq!(e.variables(), vec!["A", "BLOCK_M", "HEADS", "SEQ_Q"]);
        assert!(e.unknown_functions().is_empty());
        let e = Expr::parse("frobnicate(A)").unwrap();
        assert_eq!(e.unknown_functions(), vec!["frobnicate"]);
    }

    #[test]
    fn errors_are_reported() {
        assert!(matches!(
            Expr::parse("(1 + 2"),
            Err(ExprError::Parse { .. })
        ));
        assert!(matches!(
            Expr::parse("BLOCK_M = 64"),
            Err(ExprError::Parse { .. })
        ));
        assert!(Expr::parse("BLOCK_M <= 64 && A != 1 && B >= 2 && C == 3").is_ok());
        let s = scope();
        let undefined = Expr::parse("NOPE + 1").unwrap().eval(&s);
        assert!(matches!(undefined, Err(ExprError::Eval { .. })));
        let div0 = Expr::parse("ceil_div(BLOCK_M, 0)").unwrap().eval(&s);
        assert!(matches!(div0, Err(ExprError::Eval { .. })));
        let not_bool = Expr::parse("BLOCK_M + 1").unwrap().eval_bool(&s);
        assert!(matches!(not_bool, Err(ExprError::Type { .. })));
    }
}
