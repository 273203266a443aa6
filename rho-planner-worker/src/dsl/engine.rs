//! The evaluation of one plan request: parse (after the nesting pre-check), resolve every
//! `load()` through the host, evaluate each module once with the evaluator limits, then
//! validate the inputs, call `build` once and return the workflow as contract data.
//!
//! Invariant: loads are resolved before a module runs, one module at a time, so ticks and
//! heap are accounted across all modules against one budget, a module is evaluated at most
//! once (cached by label) and a cycle is caught by the in-progress stack before the host is
//! asked again.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::time::Instant;

use rho_ipc::budget::Budgets;
use rho_ipc::canonical;
use rho_ipc::data::Data;
use rho_ipc::evaluated::{EvaluatedWorkflow, SourceSpan};
use rho_ipc::message::{Diagnostic, ModuleRequest, ModuleResponse, PlanRequest};
use starlark::ErrorKind;
use starlark::docs::{DocItem, DocMember};
use starlark::environment::{FrozenModule, Globals, Module};
use starlark::eval::{Evaluator, ReturnFileLoader};
use starlark::syntax::ast::{AssignTargetP, AstAssignTargetP, AstNoPayload, StmtP};
use starlark::syntax::{AstModule, Dialect};
use starlark::values::Value;
use starlark::values::dict::AllocDict;

use super::DslError;
use super::builtins::{self, check_input_value, describe_data};
use super::convert;
use super::fault::{Fault, source_span};
use super::nesting;
use super::values::Context;
use super::values::{Define, Item, RhoValue};

/// Why evaluation stopped.
pub(crate) enum Stop {
    /// Problems in the sources or inputs.
    Diagnostics(Vec<Diagnostic>),
    /// The conversation with the host broke.
    Transport(DslError),
}

impl From<Fault> for Stop {
    fn from(fault: Fault) -> Self {
        Stop::Diagnostics(vec![fault.into_diagnostic()])
    }
}

/// Asks the host for a module.
pub(crate) type HostLoader<'h> = dyn FnMut(ModuleRequest) -> Result<ModuleResponse, DslError> + 'h;

/// The name of the one global the entry module must define.
const WORKFLOW: &str = "WORKFLOW";

pub(crate) struct Engine<'c, 'h> {
    budgets: Budgets,
    globals: Globals,
    dialect: Dialect,
    context: &'c Context,
    host: &'h mut HostLoader<'h>,
    cache: HashMap<String, FrozenModule>,
    in_progress: Vec<String>,
    modules: u64,
    ticks_used: u64,
    started: Instant,
    deadline: Instant,
}

impl<'c, 'h> Engine<'c, 'h> {
    /// An engine over `globals` (made by [`builtins::globals`], possibly before the request
    /// arrived); the wall-time deadline runs from here.
    pub(crate) fn new(
        budgets: Budgets,
        globals: Globals,
        context: &'c Context,
        host: &'h mut HostLoader<'h>,
    ) -> Self {
        let started = Instant::now();
        let deadline = started + std::time::Duration::from_millis(budgets.planner_wall_ms);
        Self {
            globals,
            // Rho 1.47 evaluates the standard dialect, `lambda` included; the budgets
            // (ticks, heap, call stack) bound a lambda as they bound a `def`.
            dialect: Dialect::Standard,
            context,
            budgets,
            host,
            cache: HashMap::new(),
            in_progress: Vec::new(),
            modules: 0,
            ticks_used: 0,
            started,
            deadline,
        }
    }

    /// Evaluates the entry module and hands the workflow it defines to `finish`, before the
    /// module, its heap and the evaluator are torn down (the answer does not wait for that).
    /// `finish` is called at most once, and only when the result is `Ok`.
    pub(crate) fn run(
        &mut self,
        request: &PlanRequest,
        finish: &mut dyn FnMut(EvaluatedWorkflow),
    ) -> Result<(), Stop> {
        self.check_supplied_inputs(&request.inputs)?;
        let label = request.entry_label.clone();
        self.modules = 1;
        self.in_progress.push(label.clone());
        let ast = self.parse(&label, request.entry_source.clone())?;
        let workflow_sites = workflow_assignments(&ast);
        if let [first, second, ..] = workflow_sites.as_slice() {
            return Err(Fault::new(
                "duplicate_workflow",
                format!(
                    "WORKFLOW is assigned more than once (first at {}:{}:{}); the entry module \
                     defines exactly one WORKFLOW",
                    first.label, first.line, first.column
                ),
            )
            .or_at(Some(second.clone()))
            .into());
        }
        let loaded = self.resolve_loads(&label, &ast)?;
        let workflow_site = workflow_sites.first().cloned();
        let result = self.with_module(&loaded, false, |engine, module, eval| {
            engine.eval_in(eval, |eval, globals| {
                eval.eval_module(ast, globals).map(|_| ())
            })?;
            check_module_values(module, engine.context.limits())?;
            let Some(value) = module.get(WORKFLOW) else {
                return Err(Fault::new(
                    "missing_workflow",
                    format!("{label} defines no global WORKFLOW; assign WORKFLOW = define(...)"),
                )
                .into());
            };
            let workflow = engine.build_workflow(eval, value, &request.inputs, workflow_site)?;
            finish(workflow);
            Ok(())
        });
        self.in_progress.pop();
        result.map(|((), _)| ())
    }

    fn build_workflow<'v>(
        &mut self,
        eval: &mut Evaluator<'v, '_, '_>,
        value: Value<'v>,
        supplied: &BTreeMap<String, Data>,
        site: Option<SourceSpan>,
    ) -> Result<EvaluatedWorkflow, Stop> {
        let Some(define) = Define::from_value(value) else {
            return Err(Fault::new(
                "invalid_workflow",
                format!(
                    "WORKFLOW must be made by define(inputs, build), got {}",
                    value.get_type()
                ),
            )
            .or_at(site)
            .into());
        };
        let build = define.build;
        let Some(Item::Inputs(decls)) = RhoValue::item_of(define.inputs) else {
            return Err(
                Fault::new("internal", "define() result lost its input declarations").into(),
            );
        };
        let decls = decls.clone();
        let bound = bind_inputs(&decls.decls, supplied, decls.span.as_ref())?;

        let heap = eval.heap();
        let entries: Vec<(&str, Value<'v>)> = bound
            .iter()
            .map(|(k, v)| (k.as_str(), convert::to_value(v, heap)))
            .collect();
        let inputs_value = heap.alloc(AllocDict(entries));
        let returned = self.eval_in(eval, |eval, _| {
            eval.eval_function(build, &[inputs_value], &[])
        })?;
        let Some(Item::Workflow(workflow)) = RhoValue::item_of(returned) else {
            return Err(Fault::new(
                "invalid_workflow",
                format!(
                    "build(inputs) must return workflow(name, nodes, exports), got {}",
                    returned.get_type()
                ),
            )
            .or_at(decls.span.clone())
            .into());
        };
        Ok(EvaluatedWorkflow {
            name: workflow.name.clone(),
            inputs: decls.decls,
            bound_inputs: bound,
            nodes: workflow.nodes.clone(),
            exports: workflow.exports.clone(),
            max_parallel_commands: workflow.max_parallel_commands,
            span: workflow.span.clone(),
        })
    }

    /// Checks the supplied input values against `input_bytes` and `input_depth`.
    fn check_supplied_inputs(&self, inputs: &BTreeMap<String, Data>) -> Result<(), Stop> {
        let bytes = canonical::to_canonical_bytes(inputs).map_or(u64::MAX, |b| b.len() as u64);
        Fault::check(&self.budgets, "input_bytes", bytes)?;
        let depth = inputs.values().map(Data::depth).max().unwrap_or(0);
        Fault::check(&self.budgets, "input_depth", depth as u64)?;
        Ok(())
    }

    /// Pre-checks nesting, parses, and rewrites the size-unbounded operators.
    fn parse(&self, label: &str, source: String) -> Result<AstModule, Stop> {
        let limit = self.budgets.source_nesting_depth;
        let report = nesting::measure(&source, limit);
        if report.max_depth > limit {
            let span = report.first_over.map(|(line, column)| SourceSpan {
                label: label.to_owned(),
                line,
                column,
            });
            return Err(
                Fault::check(&self.budgets, "source_nesting_depth", report.max_depth)
                    .err()
                    .map_or_else(
                        || Fault::new("internal", "nesting check disagreed"),
                        |f| f.or_at(span),
                    )
                    .into(),
            );
        }
        // Binary `+` and `*` come only from those bytes; without either there is nothing to
        // rewrite, and the rewrite (a full pass that moves every expression node) is skipped.
        let rewrite = source.bytes().any(|b| b == b'+' || b == b'*');
        let mut ast = AstModule::parse(label, source, &self.dialect).map_err(|e| {
            let span = e.span().map(source_span);
            Fault::new("syntax", e.without_diagnostic().to_string()).or_at(span)
        })?;
        if rewrite {
            ast.replace_binary_operators(&builtins::operator_rewrites());
        }
        Ok(ast)
    }

    fn resolve_loads(
        &mut self,
        from: &str,
        ast: &AstModule,
    ) -> Result<HashMap<String, FrozenModule>, Stop> {
        let loads: Vec<(String, SourceSpan)> = ast
            .loads()
            .iter()
            .map(|l| (l.module_id.to_owned(), source_span(&l.span)))
            .collect();
        let mut out = HashMap::new();
        for (label, span) in loads {
            if out.contains_key(&label) {
                continue;
            }
            let module = self.load(&label, from, span)?;
            out.insert(label, module);
        }
        Ok(out)
    }

    fn cycle(&self, label: &str, span: SourceSpan) -> Stop {
        let start = self
            .in_progress
            .iter()
            .position(|l| l == label)
            .unwrap_or(0);
        let mut chain: Vec<&str> = self.in_progress[start..]
            .iter()
            .map(String::as_str)
            .collect();
        chain.push(label);
        Fault::new(
            "import_cycle",
            format!("load cycle: {}", chain.join(" -> ")),
        )
        .or_at(Some(span))
        .into()
    }

    fn load(&mut self, label: &str, from: &str, span: SourceSpan) -> Result<FrozenModule, Stop> {
        if let Some(module) = self.cache.get(label) {
            return Ok(module.clone());
        }
        if self.in_progress.iter().any(|l| l == label) {
            return Err(self.cycle(label, span));
        }
        let depth = self.in_progress.len() as u64;
        Fault::check(&self.budgets, "module_depth", depth)
            .map_err(|f| f.or_at(Some(span.clone())))?;
        Fault::check(&self.budgets, "module_count", self.modules + 1)
            .map_err(|f| f.or_at(Some(span.clone())))?;
        self.modules += 1;

        let request = ModuleRequest {
            label: label.to_owned(),
            from: from.to_owned(),
            span: Some(span.clone()),
        };
        let (normalized, source) = match (self.host)(request).map_err(Stop::Transport)? {
            ModuleResponse::Source { label, source } => (label, source),
            ModuleResponse::Refused { diagnostic, .. } => {
                let diagnostic = if diagnostic.span.is_none() {
                    diagnostic.at(Some(span))
                } else {
                    diagnostic
                };
                return Err(Stop::Diagnostics(vec![diagnostic]));
            }
        };
        if normalized != label {
            if let Some(module) = self.cache.get(&normalized) {
                let module = module.clone();
                self.cache.insert(label.to_owned(), module.clone());
                return Ok(module);
            }
            if self.in_progress.contains(&normalized) {
                return Err(self.cycle(&normalized, span));
            }
        }

        self.in_progress.push(normalized.clone());
        let result = self.eval_loaded(&normalized, source);
        self.in_progress.pop();
        let module = result?;
        self.cache.insert(normalized.clone(), module.clone());
        self.cache.insert(label.to_owned(), module.clone());
        Ok(module)
    }

    fn eval_loaded(&mut self, label: &str, source: String) -> Result<FrozenModule, Stop> {
        let ast = self.parse(label, source)?;
        let loaded = self.resolve_loads(label, &ast)?;
        let ((), frozen) = self.with_module(&loaded, true, |engine, module, eval| {
            engine.eval_in(eval, |eval, globals| {
                eval.eval_module(ast, globals).map(|_| ())
            })?;
            // Freezing recurses over the values the module keeps; bound their nesting first.
            check_module_values(module, engine.context.limits())?;
            Ok(())
        })?;
        frozen.ok_or_else(|| Fault::new("internal", "module was not frozen").into())
    }

    /// Runs `body` with a fresh module and a configured evaluator; when `freeze` is set the
    /// module is frozen afterwards and returned with the result.
    fn with_module<T>(
        &mut self,
        loaded: &HashMap<String, FrozenModule>,
        freeze: bool,
        body: impl for<'v, 'a> FnOnce(
            &mut Self,
            &'a Module<'v>,
            &mut Evaluator<'v, 'a, '_>,
        ) -> Result<T, Stop>,
    ) -> Result<(T, Option<FrozenModule>), Stop> {
        let modules: HashMap<&str, &FrozenModule> =
            loaded.iter().map(|(k, v)| (k.as_str(), v)).collect();
        let loader = ReturnFileLoader { modules: &modules };
        let deadline = self.deadline;
        let remaining_ticks = self.budgets.evaluator_ticks.saturating_sub(self.ticks_used);
        if remaining_ticks == 0 {
            return Err(budget_fault(&self.budgets, "evaluator_ticks", self.ticks_used + 1).into());
        }
        let context = self.context;
        Module::with_temp_heap(|module| {
            let value = {
                let mut eval = Evaluator::new(&module);
                configure(&mut eval, &self.budgets, remaining_ticks, deadline)?;
                eval.set_loader(&loader);
                eval.extra = Some(context);
                let result = body(self, &module, &mut eval);
                self.ticks_used += eval.get_total_tick_count();
                result?
            };
            let frozen = if freeze {
                Some(module.freeze().map_err(|e| {
                    Fault::new("evaluation", format!("could not freeze module: {e:?}"))
                })?)
            } else {
                None
            };
            Ok((value, frozen))
        })
    }

    /// Runs one evaluator call and maps its error to a diagnostic.
    fn eval_in<'v, T>(
        &self,
        eval: &mut Evaluator<'v, '_, '_>,
        call: impl FnOnce(&mut Evaluator<'v, '_, '_>, &Globals) -> starlark::Result<T>,
    ) -> Result<T, Stop> {
        match call(eval, &self.globals) {
            Ok(value) => Ok(value),
            Err(error) => Err(self.map_error(&error, eval).into()),
        }
    }

    fn map_error(&self, error: &starlark::Error, eval: &mut Evaluator<'_, '_, '_>) -> Fault {
        let span = error.span().map(source_span).or_else(|| {
            error
                .call_stack()
                .frames
                .iter()
                .rev()
                .find_map(|f| f.location.as_ref().map(source_span))
        });
        if let Some(fault) = fault_of(error) {
            // A fault at the failing call also gets the calls that led there; one a builtin
            // placed elsewhere (another node's line) or a budget (the whole evaluation) not.
            let at_call = fault.span.is_none() || fault.span == span;
            let fault = fault.or_at(span);
            return if at_call && fault.code != "budget" {
                fault.with_call_stack(error.call_stack())
            } else {
                fault
            };
        }
        if matches!(error.kind(), ErrorKind::StackOverflow(_)) {
            let limit = self.budgets.call_stack_depth;
            return budget_fault(&self.budgets, "call_stack_depth", limit.saturating_add(1))
                .or_at(span);
        }
        let ticks = self.ticks_used + eval.get_total_tick_count();
        if ticks > self.budgets.evaluator_ticks {
            return budget_fault(&self.budgets, "evaluator_ticks", ticks).or_at(span);
        }
        if Instant::now() >= self.deadline {
            let elapsed = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
            return budget_fault(
                &self.budgets,
                "planner_wall_ms",
                elapsed.max(self.budgets.planner_wall_ms + 1),
            )
            .or_at(span);
        }
        let used =
            (eval.heap().peak_allocated_bytes() + eval.frozen_heap().allocated_bytes()) as u64;
        if used > self.budgets.evaluator_heap_bytes {
            return budget_fault(
                &self.budgets,
                "evaluator_heap_bytes",
                used.max(self.budgets.evaluator_heap_bytes + 1),
            )
            .or_at(span);
        }
        let code = match error.kind() {
            ErrorKind::Parser(_) => "syntax",
            _ => "evaluation",
        };
        let mut message = error.without_diagnostic().to_string();
        if let Some(valid) = valid_parameters(&self.globals, &message) {
            message.push_str(&valid);
        }
        Fault::new(code, message)
            .or_at(span)
            .with_call_stack(error.call_stack())
    }
}

fn configure(
    eval: &mut Evaluator<'_, '_, '_>,
    budgets: &Budgets,
    ticks: u64,
    deadline: Instant,
) -> Result<(), Fault> {
    let internal = |e| Fault::new("internal", format!("evaluator limits: {e}"));
    eval.set_max_tick_count(ticks).map_err(internal)?;
    let stack = usize::try_from(budgets.call_stack_depth.max(1)).unwrap_or(usize::MAX);
    eval.set_max_callstack_size(stack).map_err(internal)?;
    let heap = usize::try_from(budgets.evaluator_heap_bytes.max(1)).unwrap_or(usize::MAX);
    eval.set_max_heap_size(heap).map_err(internal)?;
    eval.set_check_cancelled(Box::new(move || Instant::now() >= deadline));
    Ok(())
}

fn budget_fault(budgets: &Budgets, name: &'static str, measured: u64) -> Fault {
    match budgets.check(name, measured) {
        Err(overrun) => Fault::budget(overrun),
        Ok(()) => Fault::budget(rho_ipc::budget::BudgetOverrun {
            name: name.to_owned(),
            limit: budgets.get(name).unwrap_or(0),
            measured,
        }),
    }
}

/// For Starlark's "Found `x` extra named parameter(s) for call to F" and "Missing parameter
/// `x` for call to `F`" where `F` is one of the workflow builtins: the parameters `F` accepts
/// (read from the builtin's own signature, so the list cannot drift from the code) and, for
/// an unknown name, the closest valid one.
fn valid_parameters(globals: &Globals, message: &str) -> Option<String> {
    let (head, function) = message.split_once(" for call to ")?;
    let function = function.split_whitespace().next()?.trim_matches('`');
    let value = globals.iter().find(|(name, _)| *name == function)?.1;
    let DocItem::Member(DocMember::Function(doc)) = value.to_value().documentation() else {
        return None;
    };
    let valid: Vec<String> = doc
        .params
        .pos_or_named
        .iter()
        .chain(&doc.params.named_only)
        .map(|p| p.name.clone())
        .collect();
    if valid.is_empty() {
        return None;
    }
    let mut text = format!("; `{function}` accepts {}", valid.join(", "));
    let Some(given) = head
        .strip_prefix("Found ")
        .and_then(|h| h.strip_suffix(" extra named parameter(s)"))
    else {
        return Some(text);
    };
    for name in given.split('`').map(str::trim).filter(|w| !w.is_empty()) {
        if let Some(close) = valid
            .iter()
            .map(|v| (edit_distance(name, v), v))
            .filter(|(d, v)| *d <= (v.len() / 3).max(1))
            .min_by_key(|(d, _)| *d)
        {
            let _ = write!(text, "; did you mean `{}` for `{name}`?", close.1);
        }
    }
    Some(text)
}

/// Levenshtein distance over characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut previous = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let current = row[j + 1];
            row[j + 1] = if ca == *cb {
                previous
            } else {
                1 + previous.min(row[j]).min(row[j + 1])
            };
            previous = current;
        }
    }
    row[b.len()]
}

/// Our own fault inside a Starlark error, whatever kind wraps it.
fn fault_of(error: &starlark::Error) -> Option<Fault> {
    let (ErrorKind::Fail(inner)
    | ErrorKind::StackOverflow(inner)
    | ErrorKind::Value(inner)
    | ErrorKind::Function(inner)
    | ErrorKind::Scope(inner)
    | ErrorKind::Parser(inner)
    | ErrorKind::Freeze(inner)
    | ErrorKind::Internal(inner)
    | ErrorKind::Native(inner)
    | ErrorKind::Other(inner)) = error.kind()
    else {
        return None;
    };
    inner.downcast_ref::<Fault>().cloned()
}

/// Every top-level binding of `WORKFLOW` (assignment or load), in source order.
fn workflow_assignments(ast: &AstModule) -> Vec<SourceSpan> {
    fn targets(
        target: &AstAssignTargetP<AstNoPayload>,
        ast: &AstModule,
        out: &mut Vec<SourceSpan>,
    ) {
        match &target.node {
            AssignTargetP::Identifier(ident) if ident.node.ident == WORKFLOW => {
                out.push(source_span(&ast.file_span(ident.span)));
            }
            AssignTargetP::Tuple(items) => {
                for item in items {
                    targets(item, ast, out);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    let mut stack = vec![ast.statement()];
    while let Some(stmt) = stack.pop() {
        match &stmt.node {
            StmtP::Statements(items) => stack.extend(items.iter().rev()),
            StmtP::Assign(assign) => targets(&assign.lhs, ast, &mut out),
            StmtP::AssignModify(lhs, _, _) => targets(lhs, ast, &mut out),
            StmtP::Load(load) => {
                for arg in &load.args {
                    if arg.local.node.ident == WORKFLOW {
                        out.push(source_span(&ast.file_span(arg.local.span)));
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// Validates supplied inputs against the declarations and applies defaults.
fn bind_inputs(
    decls: &BTreeMap<String, rho_ipc::program::InputDecl>,
    supplied: &BTreeMap<String, Data>,
    span: Option<&SourceSpan>,
) -> Result<BTreeMap<String, Data>, Stop> {
    let mut problems = Vec::new();
    for name in supplied.keys() {
        if !decls.contains_key(name) {
            let known: Vec<&str> = decls.keys().map(String::as_str).collect();
            problems.push(
                Fault::new(
                    "unknown_input",
                    format!(
                        "unknown input {name:?}: the workflow declares {}",
                        if known.is_empty() {
                            "no inputs".to_owned()
                        } else {
                            known.join(", ")
                        }
                    ),
                )
                .or_at(span.cloned())
                .into_diagnostic(),
            );
        }
    }
    let mut bound = BTreeMap::new();
    for (name, decl) in decls {
        let value = match (supplied.get(name), &decl.default) {
            (Some(value), _) => value,
            (None, Some(default)) => default,
            (None, None) => {
                problems.push(
                    Fault::new("missing_input", format!("missing required input {name:?}"))
                        .or_at(span.cloned())
                        .into_diagnostic(),
                );
                continue;
            }
        };
        if let Err(expected) = check_input_value(&decl.ty, value) {
            let code = if matches!(decl.ty, rho_ipc::program::InputType::Enum { .. }) {
                "input_not_in_enum"
            } else {
                "input_type"
            };
            problems.push(
                Fault::new(
                    code,
                    format!(
                        "input {name:?} must be {expected}, got {}",
                        describe_data(value)
                    ),
                )
                .or_at(span.cloned())
                .into_diagnostic(),
            );
            continue;
        }
        bound.insert(name.clone(), value.clone());
    }
    if problems.is_empty() {
        Ok(bound)
    } else {
        Err(Stop::Diagnostics(problems))
    }
}

/// Walks every value a module keeps (iteratively) so freezing cannot meet a nesting deeper
/// than the converter accepts.
fn check_module_values(module: &Module<'_>, limits: convert::Limits) -> Result<(), Fault> {
    for (name, _) in module.names_and_visibilities() {
        let Some(value) = module.get(name.as_str()) else {
            continue;
        };
        nesting_of(value, limits, name.as_str())?;
    }
    Ok(())
}

fn nesting_of(value: Value<'_>, limits: convert::Limits, name: &str) -> Result<(), Fault> {
    let mut stack: Vec<(Value<'_>, u64)> = vec![(value, 0)];
    let mut visited = 0u64;
    while let Some((v, depth)) = stack.pop() {
        visited += 1;
        if visited > limits.list_items.saturating_mul(16).max(1 << 20) {
            return Err(Fault::new(
                "value_too_large",
                format!("global {name:?} holds too many nested values to check before freezing"),
            ));
        }
        let children: Vec<Value<'_>> = if let Some(items) = convert::sequence(v, limits)? {
            items.to_vec()
        } else if let Some(dict) = starlark::values::dict::DictRef::from_value(v) {
            convert::check_dict(limits, dict.len())?;
            dict.iter().flat_map(|(k, v)| [k, v]).collect()
        } else {
            if let Some(text) = v.unpack_str() {
                convert::check_string(limits, text.len())?;
            }
            continue;
        };
        if depth + 1 > limits.max_depth.max(64) {
            return Err(Fault::new(
                "value_too_deep",
                format!(
                    "global {name:?} nests containers more than {} levels deep",
                    limits.max_depth.max(64)
                ),
            ));
        }
        stack.extend(children.into_iter().map(|c| (c, depth + 1)));
    }
    Ok(())
}
