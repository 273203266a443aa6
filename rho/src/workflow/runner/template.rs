//! Rendering argv and prompt templates from validated upstream values at launch time.
//!
//! Invariant: a rendered value is a pure function of the template and the durable scope
//! state (strings as they are, anything else as compact JSON), and every rendered template
//! and expanded argv is checked against its frozen budget before anything is started.

use rho_ipc::budget::Budgets;
use rho_ipc::data::Data;
use rho_ipc::program::{Template, TemplatePart};

use crate::workflow::scheduler::resolve;
use crate::workflow::state::ScopeState;

/// Renders one template; `Err` names the unavailable reference or the budget exceeded.
pub fn render(
    template: &Template,
    scope: &ScopeState,
    budgets: &Budgets,
    what: &str,
) -> Result<String, String> {
    let mut out = String::new();
    for part in &template.0 {
        match part {
            TemplatePart::Text(text) => out.push_str(text),
            TemplatePart::Ref(reference) => match resolve(scope, reference)? {
                Data::String(s) => out.push_str(&s),
                other => out.push_str(&other.to_string()),
            },
        }
    }
    budgets
        .check("rendered_template_bytes", out.len() as u64)
        .map_err(|overrun| format!("{what}: {overrun}"))?;
    Ok(out)
}

/// Renders a command's argv (`argv0` then each argument) and checks `expanded_argv_bytes`
/// (every argument plus its terminating NUL, as `execve` counts them).
pub fn render_argv(
    argv0: &str,
    args: &[Template],
    scope: &ScopeState,
    budgets: &Budgets,
) -> Result<Vec<String>, String> {
    let mut argv = Vec::with_capacity(args.len() + 1);
    argv.push(argv0.to_owned());
    for (i, arg) in args.iter().enumerate() {
        argv.push(render(arg, scope, budgets, &format!("argument {}", i + 1))?);
    }
    let total: u64 = argv.iter().map(|a| a.len() as u64 + 1).sum();
    budgets
        .check("expanded_argv_bytes", total)
        .map_err(|overrun| format!("argv: {overrun}"))?;
    Ok(argv)
}

/// Renders an agent prompt and checks `expanded_prompt_bytes`.
pub fn render_prompt(
    prompt: &Template,
    scope: &ScopeState,
    budgets: &Budgets,
) -> Result<String, String> {
    let text = render(prompt, scope, budgets, "prompt")?;
    budgets
        .check("expanded_prompt_bytes", text.len() as u64)
        .map_err(|overrun| format!("prompt: {overrun}"))?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rho_ipc::program::Reference;

    #[test]
    fn strings_verbatim_others_compact_json() {
        let mut scope = ScopeState::default();
        scope.outputs.insert(
            "a".into(),
            Data::Map(
                [
                    ("name".to_owned(), Data::String("x y".into())),
                    (
                        "list".to_owned(),
                        Data::List(vec![Data::Int(1), Data::Bool(true)]),
                    ),
                ]
                .into(),
            ),
        );
        scope.command_exits.insert("a".into(), 3);
        let t = Template(vec![
            TemplatePart::Text("n=".into()),
            TemplatePart::Ref(Reference::Output {
                node: "a".into(),
                path: vec!["name".into()],
            }),
            TemplatePart::Text(" l=".into()),
            TemplatePart::Ref(Reference::Output {
                node: "a".into(),
                path: vec!["list".into()],
            }),
            TemplatePart::Text(" e=".into()),
            TemplatePart::Ref(Reference::ExitCode { node: "a".into() }),
        ]);
        let budgets = Budgets::default();
        assert_eq!(
            render(&t, &scope, &budgets, "arg").unwrap(),
            "n=x y l=[1,true] e=3"
        );
        let missing = Template(vec![TemplatePart::Ref(Reference::Output {
            node: "b".into(),
            path: vec![],
        })]);
        assert!(
            render(&missing, &scope, &budgets, "arg")
                .unwrap_err()
                .contains("no output")
        );
    }

    #[test]
    fn budgets_are_enforced_and_named() {
        let scope = ScopeState::default();
        let mut budgets = Budgets::default();
        assert!(budgets.set("rendered_template_bytes", 3));
        let err = render(&Template::text("abcd"), &scope, &budgets, "argument 1").unwrap_err();
        assert!(
            err.contains("rendered_template_bytes") && err.contains("argument 1"),
            "{err}"
        );
        let mut budgets = Budgets::default();
        assert!(budgets.set("expanded_argv_bytes", 6));
        // "ab\0" + "cd\0" = 6 fits; one more byte does not.
        assert!(render_argv("ab", &[Template::text("cd")], &scope, &budgets).is_ok());
        let err = render_argv("ab", &[Template::text("cde")], &scope, &budgets).unwrap_err();
        assert!(
            err.contains("expanded_argv_bytes") && err.contains("measured 7"),
            "{err}"
        );
    }
}
