//! The per-runtime model rules: how `model-policy`, `model` and `provider` combine into the
//! effective [`ModelSelection`] for runtime rho and for runtime claude-cli.
//!
//! Invariant: combinations are judged only when every model key involved has a usable value.

use super::super::frontmatter::Diagnostic;
use super::fields::RawFields;
use super::values::{ModelPolicy, ModelSelection};

/// Whether the model-selection keys all have usable values (else their combinations are not
/// checked: the unusable one is reported already).
pub(super) fn model_keys_usable(raw: &RawFields) -> bool {
    !["model-policy", "model", "provider"]
        .iter()
        .any(|k| raw.is_broken(k))
}

pub(super) fn rho_model(raw: &RawFields, problems: &mut Vec<Diagnostic>) -> ModelSelection {
    if let Some((line, model)) = &raw.model
        && model == "@"
    {
        problems.push(Diagnostic::keyed(
            *line,
            "model",
            "`@` must be followed by an alias name",
        ));
    }
    // An `@alias` may come with a `provider`: the binder then requires the alias to resolve to
    // that provider (see `binder`), so the pair is a checked statement, never a silent override.
    let mut combinations = Vec::new();
    let selection = match (raw.model_policy, &raw.model, &raw.provider) {
        (None, None, None) => ModelSelection::Inherit,
        (None, None, Some((line, _))) => {
            combinations.push(Diagnostic::keyed(
                *line,
                "provider",
                "needs a `model` (without one the parent's provider and model are kept)",
            ));
            ModelSelection::Inherit
        }
        (Some((line, ModelPolicy::Inherit)), model, provider) => {
            for (key, present) in [("model", model), ("provider", provider)] {
                if let Some((l, _)) = present {
                    combinations.push(Diagnostic::keyed(
                        *l,
                        key,
                        format!(
                            "must be omitted with model-policy: inherit (line {line}), which \
                             keeps the parent's provider and model; or use prefer, require or \
                             select"
                        ),
                    ));
                }
            }
            ModelSelection::Inherit
        }
        (Some((line, policy)), None, _) => {
            combinations.push(Diagnostic::keyed(
                line,
                "model-policy",
                format!("`{}` needs a `model`", policy.as_str()),
            ));
            ModelSelection::Inherit
        }
        (policy, Some((_, model)), provider) => ModelSelection::Pinned {
            policy: policy.map_or(ModelPolicy::Select, |(_, p)| p),
            model: model.clone(),
            provider: provider.as_ref().map(|(_, p)| p.clone()),
        },
    };
    if model_keys_usable(raw) {
        problems.extend(combinations);
    }
    selection
}

pub(super) fn claude_model(raw: &RawFields, problems: &mut Vec<Diagnostic>) -> ModelSelection {
    if let Some((line, _)) = &raw.provider {
        problems.push(Diagnostic::keyed(
            *line,
            "provider",
            "is not allowed with runtime: claude-cli (Claude Code uses its own sign-in); remove \
             it, or use runtime: rho to pick a provider",
        ));
    }
    if let Some((line, model)) = &raw.model
        && model.starts_with('@')
    {
        problems.push(Diagnostic::keyed(
            *line,
            "model",
            format!(
                "`{model}`: Rho @alias models are not resolved for runtime: claude-cli; write a \
                 Claude model name or Claude alias (such as `opus`)"
            ),
        ));
    }
    if let Some((line, p @ (ModelPolicy::Prefer | ModelPolicy::Require))) = raw.model_policy {
        problems.push(Diagnostic::keyed(
            line,
            "model-policy",
            format!(
                "`{}` is not available on runtime: claude-cli; allowed: inherit | select",
                p.as_str()
            ),
        ));
        return ModelSelection::Inherit;
    }
    let mut combinations = Vec::new();
    let selection = match (raw.model_policy, &raw.model) {
        (Some((line, ModelPolicy::Inherit)), Some((mline, _))) => {
            combinations.push(Diagnostic::keyed(
                *mline,
                "model",
                format!(
                    "must be omitted with model-policy: inherit (line {line}), which keeps \
                     Claude's default model"
                ),
            ));
            ModelSelection::Inherit
        }
        (Some((line, ModelPolicy::Select)), None) => {
            combinations.push(Diagnostic::keyed(
                line,
                "model-policy",
                "`select` needs a `model`",
            ));
            ModelSelection::Inherit
        }
        (_, None) => ModelSelection::Inherit,
        (_, Some((_, model))) => ModelSelection::Pinned {
            policy: ModelPolicy::Select,
            model: model.clone(),
            provider: None,
        },
    };
    if model_keys_usable(raw) {
        problems.extend(combinations);
    }
    selection
}
