//! Byte counting for the values the builtins keep on the Rust heap: the Starlark heap limit
//! does not see them, so each is charged to `evaluator_heap_bytes` by these estimates.
//!
//! Invariant: every estimate counts at least the bytes of the strings it holds plus a fixed
//! overhead per part, so a value that grows in any dimension grows its charge.

use rho_ipc::data::Data;
use rho_ipc::evaluated::{EvaluatedExecution, EvaluatedNode};
use rho_ipc::program::{Condition, Reference, Schema, Template, TemplatePart};

/// Nesting depth of a schema: scalars and enums are 1, lists and records one more than
/// their deepest part; `stdout_json` adds nothing.
pub(crate) fn schema_depth(schema: &Schema) -> u64 {
    let mut max = 0;
    let mut stack = vec![(schema, 1u64)];
    while let Some((s, d)) = stack.pop() {
        max = max.max(d);
        match s {
            Schema::List { items } => stack.push((items, d + 1)),
            Schema::Record { fields } => stack.extend(fields.values().map(|f| (&f.schema, d + 1))),
            Schema::StdoutJson { schema } => stack.push((schema, d)),
            _ => {}
        }
    }
    max
}

pub(super) fn schema_bytes(schema: &Schema) -> u64 {
    let mut total = 0u64;
    let mut stack = vec![schema];
    while let Some(s) = stack.pop() {
        total += 16;
        match s {
            Schema::Enum { members } => total += members.iter().map(data_bytes).sum::<u64>(),
            Schema::List { items } => stack.push(items),
            Schema::Record { fields } => {
                for (name, field) in fields {
                    total += name.len() as u64;
                    stack.push(&field.schema);
                }
            }
            Schema::StdoutJson { schema } => stack.push(schema),
            _ => {}
        }
    }
    total
}

pub(super) fn data_bytes(data: &Data) -> u64 {
    let mut total = 0u64;
    let mut stack = vec![data];
    while let Some(d) = stack.pop() {
        total += 16;
        match d {
            Data::String(s) => total += s.len() as u64,
            Data::List(items) => stack.extend(items.iter()),
            Data::Map(map) => {
                for (k, v) in map {
                    total += k.len() as u64;
                    stack.push(v);
                }
            }
            _ => {}
        }
    }
    total
}

pub(super) fn template_bytes(template: &Template) -> u64 {
    template
        .0
        .iter()
        .map(|p| match p {
            TemplatePart::Text(t) => t.len() as u64 + 16,
            TemplatePart::Ref(r) => reference_bytes(r),
        })
        .sum()
}

pub(super) fn reference_bytes(reference: &Reference) -> u64 {
    match reference {
        Reference::Output { node, path } => {
            32 + node.len() as u64 + path.iter().map(|p| p.len() as u64 + 16).sum::<u64>()
        }
        Reference::Status { node } | Reference::ExitCode { node } => 32 + node.len() as u64,
    }
}

pub(super) fn condition_bytes(condition: &Condition) -> u64 {
    let mut total = 0u64;
    let mut stack = vec![condition];
    while let Some(c) = stack.pop() {
        total += 32;
        match c {
            Condition::Equals { reference, value } => {
                total += reference_bytes(reference) + data_bytes(value);
            }
            Condition::IsOneOf { reference, values } => {
                total += reference_bytes(reference) + values.iter().map(data_bytes).sum::<u64>();
            }
            Condition::All { conditions } | Condition::Any { conditions } => {
                stack.extend(conditions);
            }
            Condition::Not { condition } => stack.push(condition),
        }
    }
    total
}

pub(super) fn node_bytes(node: &EvaluatedNode) -> u64 {
    let mut total = 128 + node.name.len() as u64;
    total += node.needs.iter().map(|n| n.len() as u64 + 24).sum::<u64>();
    total += node.when.as_ref().map_or(0, condition_bytes);
    total += node.output.as_ref().map_or(0, schema_bytes);
    total += match &node.execution {
        EvaluatedExecution::Agent { agent, prompt } => agent.len() as u64 + template_bytes(prompt),
        EvaluatedExecution::Command { argv0, args, cwd } => {
            argv0.len() as u64 + cwd.len() as u64 + args.iter().map(template_bytes).sum::<u64>()
        }
        EvaluatedExecution::Shell {
            executable,
            arguments,
            command,
            cwd,
        } => {
            (executable.len() + command.len() + cwd.len()) as u64
                + arguments.iter().map(|a| a.len() as u64 + 24).sum::<u64>()
        }
    };
    total
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use rho_ipc::program::RecordField;

    use super::*;

    #[test]
    fn schema_depth_counts_lists_and_records_but_not_stdout_json() {
        assert_eq!(schema_depth(&Schema::String), 1);
        let list = Schema::List {
            items: Box::new(Schema::Integer),
        };
        assert_eq!(schema_depth(&list), 2);
        let record = Schema::Record {
            fields: BTreeMap::from([(
                "x".to_owned(),
                RecordField {
                    schema: list.clone(),
                    optional: false,
                },
            )]),
        };
        assert_eq!(schema_depth(&record), 3);
        let wrapped = Schema::StdoutJson {
            schema: Box::new(record),
        };
        assert_eq!(schema_depth(&wrapped), 3);
    }

    #[test]
    fn byte_estimates_grow_with_content() {
        let short = Data::String("a".to_owned());
        let long = Data::String("a".repeat(100));
        assert_eq!(data_bytes(&long) - data_bytes(&short), 99);
        let list = Data::List(vec![short.clone(), long.clone()]);
        assert_eq!(
            data_bytes(&list),
            16 + data_bytes(&short) + data_bytes(&long)
        );

        let text = Template::text("hello");
        assert_eq!(template_bytes(&text), 5 + 16);
        let reference = Reference::Output {
            node: "build".to_owned(),
            path: vec!["a".to_owned(), "bc".to_owned()],
        };
        assert_eq!(reference_bytes(&reference), 32 + 5 + 17 + 18);

        let equals = Condition::Equals {
            reference: reference.clone(),
            value: short.clone(),
        };
        let not = Condition::Not {
            condition: Box::new(equals.clone()),
        };
        assert_eq!(condition_bytes(&not), 32 + condition_bytes(&equals));
        assert_eq!(
            condition_bytes(&equals),
            32 + reference_bytes(&reference) + data_bytes(&short)
        );

        let enumeration = Schema::Enum {
            members: vec![short.clone(), long.clone()],
        };
        assert_eq!(
            schema_bytes(&enumeration),
            16 + data_bytes(&short) + data_bytes(&long)
        );
    }
}
