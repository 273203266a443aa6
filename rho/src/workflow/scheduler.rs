//! The deterministic scheduler: which pending nodes are decided how, and which ready nodes
//! launch, as a pure function of the frozen program and the durable state.
//!
//! Invariant: nothing here reads the clock, a file or a process, and nothing depends on
//! iteration order other than node-ID order, so for one durable state the decisions and the
//! launches are always the same (a recorded journal replays to the same launches).
//!
//! One pass (running.md, "Deterministic scheduling"):
//! 1. decide pending nodes in node-ID order, repeating until no more can be decided (deciding
//!    a node `skipped` or `blocked` can make a later one decidable);
//! 2. build the ready set in node-ID order;
//! 3. walk it: stop when the total limit is full, skip a node whose kind lane is full, launch a
//!    read-only node when no writer holds the checkout and a mutating node when nobody holds
//!    it, and stop at the first node whose checkout access does not fit, so readers behind a
//!    waiting writer cannot starve it;
//! 4. a second walk would launch nothing more (launching changes no decision), so the pass
//!    ends there.
//!
//! [`pass`] is the specification: it looks every node up by id. [`Scheduler`] is the same
//! function over a node index computed once per program, so one pass is a walk over plain
//! vectors; the owner runs a pass after every worker message, and the id lookups made a
//! 1,000-node run quadratic. Its result must equal [`pass`] for every (program, state): debug
//! builds assert it on every pass, and a property test replays random journals against both.

use std::collections::{BTreeMap, HashMap};

use rho_ipc::data::Data;
use rho_ipc::program::{
    Access, Condition, Execution, FrozenProgram, Node, NodeKind, Reference, SchedulerSettings,
    Template,
};

use crate::workflow::state::{NodeState, Outcome, ScopeState};

/// A three-valued truth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Truth {
    /// Holds.
    True,
    /// Does not hold.
    False,
    /// A reference it reads has no value.
    Unavailable,
}

/// A decision for one pending node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The node.
    pub node: String,
    /// `ready`, `skipped` or `blocked`.
    pub state: NodeState,
    /// Why, for `skipped` and `blocked`.
    pub reason: Option<String>,
}

/// What one scheduling pass decided.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pass {
    /// Decisions, in the order they were made.
    pub decisions: Vec<Decision>,
    /// Nodes to launch, in launch order.
    pub launches: Vec<String>,
}

/// Node states as seen during a pass: the durable state plus the decisions made so far.
struct View<'a> {
    scope: &'a ScopeState,
    overlay: BTreeMap<&'a str, NodeState>,
}

impl View<'_> {
    fn state(&self, node: &str) -> Option<NodeState> {
        self.overlay
            .get(node)
            .copied()
            .or_else(|| self.scope.node_state(node))
    }
}

/// Resolves a reference against a scope; `Err` says why it is unavailable.
pub fn resolve(scope: &ScopeState, reference: &Reference) -> Result<Data, String> {
    resolve_with(scope, reference, |n| scope.node_state(n))
}

fn resolve_with(
    scope: &ScopeState,
    reference: &Reference,
    state_of: impl Fn(&str) -> Option<NodeState>,
) -> Result<Data, String> {
    match reference {
        Reference::Status { node } => match state_of(node) {
            Some(s) if s.is_terminal() => Ok(Data::String(s.as_str().to_owned())),
            Some(s) => Err(format!(
                "node `{node}` has no terminal status yet (it is {s})"
            )),
            None => Err(format!("node `{node}` does not exist")),
        },
        Reference::ExitCode { node } => scope
            .command_exits
            .get(node)
            .map(|c| Data::Int(*c))
            .ok_or_else(|| format!("node `{node}` has no exit code")),
        Reference::Output { node, path } => {
            let mut value = scope
                .outputs
                .get(node)
                .ok_or_else(|| format!("node `{node}` has no output"))?;
            for (i, field) in path.iter().enumerate() {
                value = match value {
                    Data::Map(map) => map.get(field),
                    _ => None,
                }
                .ok_or_else(|| {
                    format!(
                        "output of node `{node}` has no field `{}`",
                        path[..=i].join(".")
                    )
                })?;
            }
            Ok(value.clone())
        }
    }
}

/// Evaluates a condition with three-valued logic.
pub fn evaluate(scope: &ScopeState, condition: &Condition) -> Truth {
    evaluate_with(scope, condition, &|n| scope.node_state(n))
}

fn evaluate_with(
    scope: &ScopeState,
    condition: &Condition,
    state_of: &dyn Fn(&str) -> Option<NodeState>,
) -> Truth {
    match condition {
        Condition::Equals { reference, value } => match resolve_with(scope, reference, state_of) {
            Ok(v) => truth(&v == value),
            Err(_) => Truth::Unavailable,
        },
        Condition::IsOneOf { reference, values } => {
            match resolve_with(scope, reference, state_of) {
                Ok(v) => truth(values.contains(&v)),
                Err(_) => Truth::Unavailable,
            }
        }
        Condition::All { conditions } => {
            let parts: Vec<Truth> = conditions
                .iter()
                .map(|c| evaluate_with(scope, c, state_of))
                .collect();
            if parts.contains(&Truth::False) {
                Truth::False
            } else if parts.contains(&Truth::Unavailable) {
                Truth::Unavailable
            } else {
                Truth::True
            }
        }
        Condition::Any { conditions } => {
            let parts: Vec<Truth> = conditions
                .iter()
                .map(|c| evaluate_with(scope, c, state_of))
                .collect();
            if parts.contains(&Truth::True) {
                Truth::True
            } else if parts.contains(&Truth::Unavailable) {
                Truth::Unavailable
            } else {
                Truth::False
            }
        }
        Condition::Not { condition } => match evaluate_with(scope, condition, state_of) {
            Truth::True => Truth::False,
            Truth::False => Truth::True,
            Truth::Unavailable => Truth::Unavailable,
        },
    }
}

fn truth(b: bool) -> Truth {
    if b { Truth::True } else { Truth::False }
}

/// The references a node's execution reads at launch (argv or prompt templates).
pub fn template_references(node: &Node) -> Vec<&Reference> {
    match &node.execution {
        Execution::Agent { prompt, .. } => prompt.references().collect(),
        Execution::Command { args, .. } => args.iter().flat_map(Template::references).collect(),
        Execution::Shell { .. } => Vec::new(),
    }
}

/// Decides a pending node whose needs are all terminal; `None` while a need is not.
fn decide_with(
    scope: &ScopeState,
    node: &Node,
    state_of: &dyn Fn(&str) -> Option<NodeState>,
) -> Option<(NodeState, Option<String>)> {
    decide_core(
        scope,
        node,
        node.needs
            .iter()
            .map(|need| (need.as_str(), state_of(need))),
        state_of,
    )
}

/// [`decide_with`] with the states of the node's needs given in `needs` order (the indexed
/// scheduler reads them by position instead of by id).
fn decide_core<'n>(
    scope: &ScopeState,
    node: &Node,
    needs: impl Iterator<Item = (&'n str, Option<NodeState>)>,
    state_of: &dyn Fn(&str) -> Option<NodeState>,
) -> Option<(NodeState, Option<String>)> {
    // No capacity up front: most calls meet a non-terminal need first and allocate nothing.
    let mut need_states = Vec::new();
    for (need, s) in needs {
        let s = s?;
        if !s.is_terminal() {
            return None;
        }
        need_states.push((need, s));
    }
    let decided = if let Some(condition) = &node.when {
        match evaluate_with(scope, condition, state_of) {
            Truth::True => (NodeState::Ready, None),
            Truth::False => (NodeState::Skipped, Some("condition is false".to_owned())),
            Truth::Unavailable => (
                NodeState::Blocked,
                Some("condition reads an unavailable value".to_owned()),
            ),
        }
    } else if let Some((need, s)) = need_states.iter().find(|(_, s)| {
        matches!(
            s,
            NodeState::Failure | NodeState::Denial | NodeState::Cancellation | NodeState::Blocked
        )
    }) {
        (
            NodeState::Blocked,
            Some(format!("need `{need}` ended in {s}")),
        )
    } else if let Some((need, _)) = need_states.iter().find(|(_, s)| *s == NodeState::Skipped) {
        (
            NodeState::Skipped,
            Some(format!("need `{need}` was skipped")),
        )
    } else {
        (NodeState::Ready, None)
    };
    if decided.0 == NodeState::Ready {
        for reference in template_references(node) {
            if let Err(why) = resolve_with(scope, reference, state_of) {
                return Some((
                    NodeState::Blocked,
                    Some(format!("template input unavailable: {why}")),
                ));
            }
        }
    }
    Some(decided)
}

/// Decides one pending node against the durable state alone (`None` while a need is not
/// terminal or the node is not pending).
pub fn decide(scope: &ScopeState, node: &Node) -> Option<(NodeState, Option<String>)> {
    if scope.node_state(&node.id) != Some(NodeState::Pending) {
        return None;
    }
    decide_with(scope, node, &|n| scope.node_state(n))
}

/// Who holds the checkout and how many nodes run, per lane.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Usage {
    total: u32,
    agents: u32,
    commands: u32,
    readers: u32,
    writer: bool,
}

impl Usage {
    fn add(&mut self, node: &Node) {
        self.total += 1;
        match node.kind() {
            NodeKind::Agent => self.agents += 1,
            NodeKind::Command | NodeKind::Shell => self.commands += 1,
        }
        match node.access {
            Access::ReadOnly => self.readers += 1,
            Access::Mutating => self.writer = true,
        }
    }
}

/// One scheduling pass over the root scope. Cancellation is the owner's business: while a
/// run is cancelling the owner does not ask for launches.
pub fn pass(program: &FrozenProgram, scope: &ScopeState) -> Pass {
    let mut out = Pass::default();
    let mut view = View {
        scope,
        overlay: BTreeMap::new(),
    };

    // Step 1: decide pending nodes in node-ID order until nothing changes.
    loop {
        let mut changed = false;
        for node in &program.root.nodes {
            if view.state(&node.id) != Some(NodeState::Pending) {
                continue;
            }
            let decided = {
                let v = &view;
                decide_with(scope, node, &|n| v.state(n))
            };
            if let Some((state, reason)) = decided {
                view.overlay.insert(node.id.as_str(), state);
                out.decisions.push(Decision {
                    node: node.id.clone(),
                    state,
                    reason,
                });
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }

    // Steps 2 and 3: the ready set in node-ID order, walked against capacity.
    let mut usage = Usage::default();
    for node in &program.root.nodes {
        if view.state(&node.id) == Some(NodeState::Running) {
            usage.add(node);
        }
    }
    let ready = program
        .root
        .nodes
        .iter()
        .filter(|node| view.state(&node.id) == Some(NodeState::Ready));
    out.launches = launch_walk(&program.scheduler, usage, ready);
    out
}

/// The state of each program node in program order (see [`Scheduler::node_states`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeStates(Vec<Option<NodeState>>);

/// The scheduler over a node index computed once per program: the same function as [`pass`]
/// (same decisions in the same order, same launches), at the cost of walks over vectors.
///
/// It holds nothing derived from any state, only from the program, so it stays a pure
/// function of (program, state) and can be built anew at any time (resume, replay).
#[derive(Debug, Clone)]
pub struct Scheduler {
    /// Node index by id.
    index: HashMap<String, usize>,
    /// Per node, in program order: the index of each need (`None` when the program has no
    /// such node; such a need never becomes terminal, as in [`pass`]).
    needs: Vec<Vec<Option<usize>>>,
    /// Whether the program's nodes are in strictly increasing id order, so the scope's task
    /// map (ordered by id) can be read alongside them in one walk.
    sorted: bool,
}

impl Scheduler {
    /// Indexes a program's root scope.
    pub fn new(program: &FrozenProgram) -> Self {
        let nodes = &program.root.nodes;
        let mut index = HashMap::with_capacity(nodes.len());
        for (i, node) in nodes.iter().enumerate() {
            // First occurrence wins, like a lookup by id would find it.
            index.entry(node.id.clone()).or_insert(i);
        }
        let needs = nodes
            .iter()
            .map(|node| node.needs.iter().map(|n| index.get(n).copied()).collect())
            .collect();
        let sorted = nodes.windows(2).all(|w| w[0].id < w[1].id);
        Scheduler {
            index,
            needs,
            sorted,
        }
    }

    /// Whether this index was built from a program with these nodes (same count, same
    /// order of ids at the ends); anything else falls back to [`pass`].
    fn fits(&self, program: &FrozenProgram) -> bool {
        let nodes = &program.root.nodes;
        nodes.len() == self.needs.len()
            && nodes.len() == self.index.len()
            && nodes
                .first()
                .is_none_or(|n| self.index.get(&n.id) == Some(&0))
            && nodes
                .last()
                .is_none_or(|n| self.index.get(&n.id) == Some(&(nodes.len() - 1)))
    }

    /// The state of every program node in the scope, in program order.
    fn states(&self, program: &FrozenProgram, scope: &ScopeState) -> Vec<Option<NodeState>> {
        let nodes = &program.root.nodes;
        if !self.sorted {
            return nodes.iter().map(|n| scope.node_state(&n.id)).collect();
        }
        // Both sequences are ordered by id: one merge walk, no lookups.
        let mut out = Vec::with_capacity(nodes.len());
        let mut tasks = scope.tasks.iter().peekable();
        for node in nodes {
            let mut found = None;
            while let Some((id, task)) = tasks.peek() {
                match id.as_str().cmp(node.id.as_str()) {
                    std::cmp::Ordering::Less => {
                        tasks.next();
                    }
                    std::cmp::Ordering::Equal => {
                        found = Some(task.state);
                        tasks.next();
                        break;
                    }
                    std::cmp::Ordering::Greater => break,
                }
            }
            out.push(found);
        }
        out
    }

    /// One scheduling pass; equal to [`pass`]`(program, scope)`.
    pub fn pass(&self, program: &FrozenProgram, scope: &ScopeState) -> Pass {
        if !self.fits(program) {
            return pass(program, scope);
        }
        let out = self.indexed_pass(program, scope, self.states(program, scope));
        debug_assert_eq!(
            out,
            pass(program, scope),
            "the indexed scheduler departed from the specification"
        );
        out
    }

    /// The state of every program node in `scope`, in program order, for a caller that
    /// keeps it current record by record ([`Scheduler::refresh`]) instead of having every
    /// pass read it from the scope's task map (one string comparison per node and pass).
    pub fn node_states(&self, program: &FrozenProgram, scope: &ScopeState) -> NodeStates {
        NodeStates(self.states(program, scope))
    }

    /// Reads `node`'s state from `scope` again (after a record about that node).
    pub fn refresh(&self, states: &mut NodeStates, scope: &ScopeState, node: &str) {
        if let Some(&i) = self.index.get(node)
            && let Some(slot) = states.0.get_mut(i)
        {
            *slot = scope.node_state(node);
        }
    }

    /// [`Scheduler::pass`] over node states the caller kept current; equal to
    /// [`pass`]`(program, scope)` when `states` equals [`Scheduler::node_states`] of the
    /// scope (both are checked in debug builds).
    pub fn pass_with(
        &self,
        program: &FrozenProgram,
        scope: &ScopeState,
        states: &NodeStates,
    ) -> Pass {
        if !self.fits(program) || states.0.len() != program.root.nodes.len() {
            return pass(program, scope);
        }
        debug_assert_eq!(
            states.0,
            self.states(program, scope),
            "the node states kept by the caller departed from the scope"
        );
        let out = self.indexed_pass(program, scope, states.0.clone());
        debug_assert_eq!(
            out,
            pass(program, scope),
            "the indexed scheduler departed from the specification"
        );
        out
    }

    fn indexed_pass(
        &self,
        program: &FrozenProgram,
        scope: &ScopeState,
        mut states: Vec<Option<NodeState>>,
    ) -> Pass {
        let nodes = &program.root.nodes;
        let mut out = Pass::default();

        // Step 1, as in `pass`: sweeps in node-ID order until one decides nothing; a
        // decision is visible to the nodes after it in the same sweep.
        loop {
            let mut changed = false;
            for (i, node) in nodes.iter().enumerate() {
                if states[i] != Some(NodeState::Pending) {
                    continue;
                }
                let decided = {
                    let states = &states;
                    let state_of = |id: &str| match self.index.get(id) {
                        Some(&j) => states[j],
                        None => scope.node_state(id),
                    };
                    let needs = node
                        .needs
                        .iter()
                        .zip(&self.needs[i])
                        .map(|(id, j)| (id.as_str(), j.and_then(|j| states[j])));
                    decide_core(scope, node, needs, &state_of)
                };
                if let Some((state, reason)) = decided {
                    states[i] = Some(state);
                    out.decisions.push(Decision {
                        node: node.id.clone(),
                        state,
                        reason,
                    });
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }

        // Steps 2 and 3.
        let mut usage = Usage::default();
        for (node, state) in nodes.iter().zip(&states) {
            if *state == Some(NodeState::Running) {
                usage.add(node);
            }
        }
        let ready = nodes
            .iter()
            .zip(&states)
            .filter(|(_, state)| **state == Some(NodeState::Ready))
            .map(|(node, _)| node);
        out.launches = launch_walk(&program.scheduler, usage, ready);
        out
    }
}

/// Step 3 of a pass, shared by both passes so the admission rule exists once: walks the
/// ready nodes in node-ID order and launches each that fits. It stops when the total limit
/// is full, skips a node whose kind lane is full, and stops at the first node whose
/// checkout access does not fit, so a waiting writer is not starved by later readers.
fn launch_walk<'a>(
    limits: &SchedulerSettings,
    mut usage: Usage,
    ready: impl Iterator<Item = &'a Node>,
) -> Vec<String> {
    let mut launches = Vec::new();
    for node in ready {
        if usage.total >= limits.max_parallel_nodes {
            break;
        }
        if !lane_has_room(limits, &usage, node.kind()) {
            continue;
        }
        let fits = match node.access {
            Access::ReadOnly => !usage.writer,
            Access::Mutating => !usage.writer && usage.readers == 0,
        };
        if !fits {
            break;
        }
        usage.add(node);
        launches.push(node.id.clone());
    }
    launches
}

fn lane_has_room(limits: &SchedulerSettings, usage: &Usage, kind: NodeKind) -> bool {
    match kind {
        NodeKind::Agent => usage.agents < limits.max_parallel_agents,
        NodeKind::Command | NodeKind::Shell => usage.commands < limits.max_parallel_commands,
    }
}

/// The workflow outcome once every node is terminal (`None` before), first match wins:
/// any cancellation; then, among nodes without `allow_failure`, denial, failure, blocked;
/// otherwise success.
pub fn outcome(program: &FrozenProgram, scope: &ScopeState) -> Option<Outcome> {
    let mut states = Vec::with_capacity(program.root.nodes.len());
    for node in &program.root.nodes {
        let s = scope.node_state(&node.id)?;
        if !s.is_terminal() {
            return None;
        }
        states.push((node.allow_failure, s));
    }
    if states.iter().any(|(_, s)| *s == NodeState::Cancellation) {
        return Some(Outcome::Cancellation);
    }
    let strict = |want: NodeState| states.iter().any(|(allowed, s)| !allowed && *s == want);
    Some(if strict(NodeState::Denial) {
        Outcome::Denial
    } else if strict(NodeState::Failure) {
        Outcome::Failure
    } else if strict(NodeState::Blocked) {
        Outcome::Blocked
    } else {
        Outcome::Success
    })
}

#[cfg(test)]
#[allow(clippy::many_single_char_names)]
pub(crate) mod tests {
    use super::*;
    use crate::workflow::state::{ScopeState, Task};
    use rho_ipc::budget::Budgets;
    use rho_ipc::program::{
        EnvironmentPolicy, FileIdentity, FileLocation, FrozenDirectory, FrozenExecutable,
        PlannerIdentity, RootScope, Template, TemplatePart, TrustRequirement,
    };

    pub(crate) fn command_node(id: &str, needs: &[&str]) -> Node {
        Node {
            id: id.to_owned(),
            needs: needs.iter().map(|s| (*s).to_owned()).collect(),
            when: None,
            allow_failure: false,
            access: Access::Mutating,
            network: rho_ipc::program::Network::Allowed,
            timeout_seconds: 60,
            max_output_bytes: 1024,
            output: None,
            execution: Execution::Command {
                program: FrozenExecutable {
                    file: FileIdentity {
                        location: FileLocation::Absolute {
                            path: "/usr/bin/true".into(),
                            device: 1,
                            inode: 1,
                        },
                        size: 1,
                        sha256: "sha256:00".into(),
                    },
                    interpreter: None,
                },
                argv0: "true".into(),
                args: vec![],
                cwd: FrozenDirectory { path: ".".into() },
            },
        }
    }

    pub(crate) fn agent_node(id: &str, needs: &[&str], access: Access) -> Node {
        Node {
            execution: Execution::Agent {
                agent: "a".into(),
                prompt: Template::text("hi"),
            },
            access,
            ..command_node(id, needs)
        }
    }

    pub(crate) fn program(mut nodes: Vec<Node>, settings: SchedulerSettings) -> FrozenProgram {
        nodes.sort_by(|a, b| a.id.cmp(&b.id));
        FrozenProgram {
            format_version: 1,
            planner: PlannerIdentity {
                name: "test".into(),
                version: "0".into(),
            },
            name: "t".into(),
            root: RootScope {
                id: "s0".into(),
                inputs: BTreeMap::new(),
                bound_inputs: BTreeMap::new(),
                exports: BTreeMap::new(),
                nodes,
            },
            agents: BTreeMap::new(),
            environment: EnvironmentPolicy {
                name: "inherit_except_credentials".into(),
                exclude: vec![],
                allow: vec![],
            },
            scheduler: settings,
            budgets: Budgets::default(),
            sources: vec![],
            trust: TrustRequirement::default(),
        }
    }

    fn scope(program: &FrozenProgram, states: &[(&str, NodeState)]) -> ScopeState {
        let mut scope = ScopeState::default();
        for node in &program.root.nodes {
            scope.tasks.insert(
                node.id.clone(),
                Task {
                    state: NodeState::Pending,
                    reason: None,
                    attempts: vec![],
                },
            );
        }
        for (id, s) in states {
            scope.tasks.get_mut(*id).unwrap().state = *s;
        }
        scope
    }

    fn settings(total: u32, agents: u32, commands: u32) -> SchedulerSettings {
        SchedulerSettings {
            max_parallel_nodes: total,
            max_parallel_agents: agents,
            max_parallel_commands: commands,
        }
    }

    fn decided(p: &Pass, id: &str) -> Option<NodeState> {
        p.decisions.iter().find(|d| d.node == id).map(|d| d.state)
    }

    fn status_is(node: &str, value: &str) -> Condition {
        Condition::Equals {
            reference: Reference::Status { node: node.into() },
            value: Data::String(value.into()),
        }
    }

    /// States kept current one node at a time give the passes of states read whole.
    #[test]
    fn states_refreshed_node_by_node_give_the_same_passes() {
        let p = program(
            vec![
                command_node("a", &[]),
                command_node("b", &["a"]),
                command_node("c", &["a"]),
                command_node("d", &["b", "c"]),
            ],
            settings(2, 2, 2),
        );
        let sched = Scheduler::new(&p);
        let mut s = scope(&p, &[]);
        let mut kept = sched.node_states(&p, &s);
        assert_eq!(sched.pass_with(&p, &s, &kept), pass(&p, &s));
        for (node, state) in [
            ("a", NodeState::Ready),
            ("a", NodeState::Running),
            ("a", NodeState::Success),
            ("b", NodeState::Ready),
            ("c", NodeState::Ready),
            ("b", NodeState::Running),
            ("b", NodeState::Failure),
        ] {
            s.tasks.get_mut(node).unwrap().state = state;
            sched.refresh(&mut kept, &s, node);
            assert_eq!(kept, sched.node_states(&p, &s), "after {node} {state:?}");
            assert_eq!(sched.pass_with(&p, &s, &kept), pass(&p, &s));
        }
        // Kept states of another program's length fall back to the scope.
        assert_eq!(
            sched.pass_with(&p, &s, &NodeStates::default()),
            pass(&p, &s)
        );
    }

    #[test]
    fn without_when_failed_need_blocks_and_skipped_need_skips() {
        let p = program(
            vec![
                command_node("a", &[]),
                command_node("b", &[]),
                command_node("c", &["a"]),
                command_node("d", &["b"]),
                command_node("e", &["a", "b"]),
            ],
            settings(4, 4, 4),
        );
        for bad in [
            NodeState::Failure,
            NodeState::Denial,
            NodeState::Cancellation,
            NodeState::Blocked,
        ] {
            let s = scope(&p, &[("a", bad), ("b", NodeState::Skipped)]);
            let ps = pass(&p, &s);
            assert_eq!(decided(&ps, "c"), Some(NodeState::Blocked), "{bad}");
            assert_eq!(decided(&ps, "d"), Some(NodeState::Skipped));
            // Blocked wins over skipped when both appear among the needs.
            assert_eq!(decided(&ps, "e"), Some(NodeState::Blocked));
        }
        let s = scope(&p, &[("a", NodeState::Success), ("b", NodeState::Running)]);
        let ps = pass(&p, &s);
        assert_eq!(decided(&ps, "c"), Some(NodeState::Ready));
        assert_eq!(
            decided(&ps, "d"),
            None,
            "a need still running keeps the node pending"
        );
    }

    #[test]
    fn with_when_true_false_unavailable() {
        let mut c = command_node("c", &["a"]);
        c.when = Some(status_is("a", "failure"));
        let mut d = command_node("d", &["a"]);
        d.when = Some(Condition::Equals {
            reference: Reference::ExitCode { node: "a".into() },
            value: Data::Int(0),
        });
        let mut e = command_node("e", &["a"]);
        e.when = Some(Condition::Equals {
            reference: Reference::Output {
                node: "a".into(),
                path: vec!["x".into()],
            },
            value: Data::Int(1),
        });
        let p = program(vec![command_node("a", &[]), c, d, e], settings(4, 4, 4));
        // a failed without an exit code or output: c runs (condition sees failure even
        // though a failed), d and e read values that do not exist.
        let s = scope(&p, &[("a", NodeState::Failure)]);
        let ps = pass(&p, &s);
        assert_eq!(decided(&ps, "c"), Some(NodeState::Ready));
        assert_eq!(decided(&ps, "d"), Some(NodeState::Blocked));
        assert_eq!(decided(&ps, "e"), Some(NodeState::Blocked));
        // a succeeded with exit 0 and output {x: 2}: c false, d true, e false.
        let mut s = scope(&p, &[("a", NodeState::Success)]);
        s.command_exits.insert("a".into(), 0);
        s.outputs.insert(
            "a".into(),
            Data::Map([("x".to_owned(), Data::Int(2))].into()),
        );
        let pass2 = pass(&p, &s);
        assert_eq!(decided(&pass2, "c"), Some(NodeState::Skipped));
        assert_eq!(decided(&pass2, "d"), Some(NodeState::Ready));
        assert_eq!(decided(&pass2, "e"), Some(NodeState::Skipped));
    }

    #[test]
    fn three_valued_all_any_not() {
        let p = program(vec![command_node("a", &[])], settings(1, 1, 1));
        let s = scope(&p, &[("a", NodeState::Success)]);
        let t = status_is("a", "success");
        let f = status_is("a", "failure");
        let u = Condition::Equals {
            reference: Reference::ExitCode { node: "a".into() },
            value: Data::Int(0),
        };
        let all = |v: Vec<Condition>| Condition::All { conditions: v };
        let any = |v: Vec<Condition>| Condition::Any { conditions: v };
        let not = |c: Condition| Condition::Not {
            condition: Box::new(c),
        };
        assert_eq!(
            evaluate(&s, &all(vec![t.clone(), u.clone()])),
            Truth::Unavailable
        );
        assert_eq!(evaluate(&s, &all(vec![f.clone(), u.clone()])), Truth::False);
        assert_eq!(evaluate(&s, &all(vec![t.clone(), t.clone()])), Truth::True);
        assert_eq!(
            evaluate(&s, &any(vec![f.clone(), u.clone()])),
            Truth::Unavailable
        );
        assert_eq!(evaluate(&s, &any(vec![t.clone(), u.clone()])), Truth::True);
        assert_eq!(evaluate(&s, &any(vec![f.clone(), f.clone()])), Truth::False);
        assert_eq!(evaluate(&s, &not(u.clone())), Truth::Unavailable);
        assert_eq!(evaluate(&s, &not(f)), Truth::True);
        assert_eq!(evaluate(&s, &all(vec![])), Truth::True);
        assert_eq!(evaluate(&s, &any(vec![])), Truth::False);
        assert_eq!(
            evaluate(
                &s,
                &Condition::IsOneOf {
                    reference: Reference::Status { node: "a".into() },
                    values: vec![
                        Data::String("skipped".into()),
                        Data::String("success".into())
                    ],
                }
            ),
            Truth::True
        );
    }

    #[test]
    fn decisions_cascade_within_one_pass_in_id_order() {
        // z fails; y (needs z) is blocked; x (needs y) is blocked in the same pass although it
        // sorts first, because the pass repeats deciding until nothing changes.
        let p = program(
            vec![
                command_node("x", &["y"]),
                command_node("y", &["z"]),
                command_node("z", &[]),
            ],
            settings(4, 4, 4),
        );
        let s = scope(&p, &[("z", NodeState::Failure)]);
        let ps = pass(&p, &s);
        let order: Vec<&str> = ps.decisions.iter().map(|d| d.node.as_str()).collect();
        assert_eq!(order, vec!["y", "x"]);
        assert!(ps.decisions.iter().all(|d| d.state == NodeState::Blocked));
    }

    #[test]
    fn unavailable_template_input_blocks_a_ready_node() {
        let mut b = command_node("b", &["a"]);
        if let Execution::Command { args, .. } = &mut b.execution {
            args.push(Template(vec![
                TemplatePart::Text("--n=".into()),
                TemplatePart::Ref(Reference::Output {
                    node: "a".into(),
                    path: vec![],
                }),
            ]));
        }
        let p = program(vec![command_node("a", &[]), b], settings(4, 4, 4));
        let s = scope(&p, &[("a", NodeState::Success)]);
        assert_eq!(decided(&pass(&p, &s), "b"), Some(NodeState::Blocked));
        let mut s = scope(&p, &[("a", NodeState::Success)]);
        s.outputs.insert("a".into(), Data::Int(1));
        assert_eq!(decided(&pass(&p, &s), "b"), Some(NodeState::Ready));
    }

    #[test]
    fn total_and_kind_lanes_limit_launches() {
        let p = program(
            vec![
                agent_node("a1", &[], Access::ReadOnly),
                agent_node("a2", &[], Access::ReadOnly),
                agent_node("a3", &[], Access::ReadOnly),
                agent_node("b1", &[], Access::ReadOnly),
            ],
            settings(3, 2, 2),
        );
        let ps = pass(&p, &scope(&p, &[]));
        // All four decided ready; the agent lane (2) admits a1 and a2, skips a3 and b1.
        assert_eq!(ps.decisions.len(), 4);
        assert_eq!(ps.launches, vec!["a1", "a2"]);

        // Total limit: stop when full even if the lane has room.
        let nodes: Vec<Node> = (0..5)
            .map(|i| agent_node(&format!("n{i}"), &[], Access::ReadOnly))
            .collect();
        let p = program(nodes, settings(2, 4, 4));
        let s = scope(&p, &[("n0", NodeState::Running)]);
        assert_eq!(pass(&p, &s).launches, vec!["n1"]);
    }

    #[test]
    fn kind_lane_full_skips_to_other_kind() {
        let mut cmd = command_node("c", &[]);
        cmd.access = Access::ReadOnly;
        let p = program(
            vec![
                agent_node("a", &[], Access::ReadOnly),
                agent_node("b", &[], Access::ReadOnly),
                cmd,
            ],
            settings(4, 1, 4),
        );
        let ps = pass(&p, &scope(&p, &[]));
        assert_eq!(ps.launches, vec!["a", "c"]);
    }

    #[test]
    fn mutating_node_waits_for_readers_and_is_not_starved() {
        // r1 reads and runs; w (mutating) is next in ID order and must wait; r2 (a reader
        // behind it) must not jump the queue, or a stream of readers could starve w.
        let p2 = program(
            vec![
                agent_node("r1", &[], Access::ReadOnly),
                agent_node("w", &[], Access::Mutating),
                agent_node("x", &[], Access::ReadOnly),
            ],
            settings(8, 8, 8),
        );
        let s2 = scope(
            &p2,
            &[
                ("r1", NodeState::Running),
                ("w", NodeState::Ready),
                ("x", NodeState::Ready),
            ],
        );
        assert!(
            pass(&p2, &s2).launches.is_empty(),
            "the reader x must not pass the waiting writer"
        );
        let s3 = scope(
            &p2,
            &[
                ("r1", NodeState::Success),
                ("w", NodeState::Ready),
                ("x", NodeState::Ready),
            ],
        );
        assert_eq!(
            pass(&p2, &s3).launches,
            vec!["w"],
            "the writer runs alone once readers left"
        );
        let s4 = scope(
            &p2,
            &[
                ("r1", NodeState::Success),
                ("w", NodeState::Running),
                ("x", NodeState::Ready),
            ],
        );
        assert!(pass(&p2, &s4).launches.is_empty(), "nobody joins a writer");
        // Readers run together.
        let p3 = program(
            vec![
                agent_node("r1", &[], Access::ReadOnly),
                agent_node("r2", &[], Access::ReadOnly),
            ],
            settings(8, 8, 8),
        );
        assert_eq!(pass(&p3, &scope(&p3, &[])).launches, vec!["r1", "r2"]);
    }

    #[test]
    fn mutating_commands_run_one_at_a_time() {
        let p = program(
            vec![
                command_node("a", &[]),
                command_node("b", &[]),
                command_node("c", &[]),
            ],
            settings(4, 4, 4),
        );
        let first = pass(&p, &scope(&p, &[]));
        assert_eq!(first.launches, vec!["a"]);
        let s = scope(
            &p,
            &[
                ("a", NodeState::Success),
                ("b", NodeState::Ready),
                ("c", NodeState::Ready),
            ],
        );
        assert_eq!(pass(&p, &s).launches, vec!["b"]);
    }

    #[test]
    fn outcome_order_and_allow_failure() {
        let mut soft = command_node("soft", &[]);
        soft.allow_failure = true;
        let p = program(vec![command_node("a", &[]), soft], settings(4, 4, 4));
        let o = |a: NodeState, s: NodeState| outcome(&p, &scope(&p, &[("a", a), ("soft", s)]));
        assert_eq!(
            o(NodeState::Success, NodeState::Failure),
            Some(Outcome::Success)
        );
        assert_eq!(
            o(NodeState::Success, NodeState::Denial),
            Some(Outcome::Success)
        );
        assert_eq!(
            o(NodeState::Success, NodeState::Cancellation),
            Some(Outcome::Cancellation)
        );
        assert_eq!(
            o(NodeState::Failure, NodeState::Denial),
            Some(Outcome::Failure)
        );
        assert_eq!(
            o(NodeState::Denial, NodeState::Success),
            Some(Outcome::Denial)
        );
        assert_eq!(
            o(NodeState::Blocked, NodeState::Success),
            Some(Outcome::Blocked)
        );
        assert_eq!(
            o(NodeState::Skipped, NodeState::Skipped),
            Some(Outcome::Success)
        );
        assert_eq!(o(NodeState::Running, NodeState::Success), None);
        // allow_failure leaves the node failed: a dependent without a condition is blocked.
        let p2 = program(
            vec![
                Node {
                    allow_failure: true,
                    ..command_node("a", &[])
                },
                command_node("b", &["a"]),
            ],
            settings(4, 4, 4),
        );
        let s = scope(&p2, &[("a", NodeState::Failure)]);
        assert_eq!(decided(&pass(&p2, &s), "b"), Some(NodeState::Blocked));
    }

    /// A small deterministic generator (xorshift64*), so the replay test needs no seed file.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        fn below(&mut self, n: usize) -> usize {
            usize::try_from(self.next() % n as u64).unwrap()
        }
    }

    /// A random acyclic program: needs point to nodes earlier in a random order (so a need
    /// may sort before or after its dependent), some nodes have a condition on a need's
    /// status or exit code, access and kind vary, limits are small.
    fn random_program(rng: &mut Rng) -> FrozenProgram {
        let n = 1 + rng.below(14);
        let mut order: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            order.swap(i, rng.below(i + 1));
        }
        let id = |k: usize| format!("n{k:02}");
        let mut nodes = Vec::new();
        for (pos, &k) in order.iter().enumerate() {
            let mut needs = Vec::new();
            for &earlier in &order[..pos] {
                if rng.below(3) == 0 {
                    needs.push(id(earlier));
                }
            }
            let access = if rng.below(2) == 0 {
                Access::ReadOnly
            } else {
                Access::Mutating
            };
            let mut node = if rng.below(3) == 0 {
                agent_node(&id(k), &[], access)
            } else {
                Node {
                    access,
                    ..command_node(&id(k), &[])
                }
            };
            if !needs.is_empty() && rng.below(3) == 0 {
                let target = needs[rng.below(needs.len())].clone();
                node.when = Some(match rng.below(3) {
                    0 => status_is(&target, "success"),
                    1 => Condition::Not {
                        condition: Box::new(status_is(&target, "failure")),
                    },
                    _ => Condition::Equals {
                        reference: Reference::ExitCode { node: target },
                        value: Data::Int(0),
                    },
                });
            }
            node.allow_failure = rng.below(4) == 0;
            node.needs = needs;
            nodes.push(node);
        }
        let total = 1 + u32::try_from(rng.below(4)).unwrap();
        let agents = 1 + u32::try_from(rng.below(3)).unwrap();
        let commands = 1 + u32::try_from(rng.below(3)).unwrap();
        program(nodes, settings(total, agents, commands))
    }

    /// Drives a random program through journal events the way the owner does (a pass, its
    /// decisions and launch intents, then one attempt ends with a random state), checking at
    /// every step that the indexed scheduler equals the specification on the replayed state.
    #[test]
    fn indexed_scheduler_equals_the_specification_on_replayed_journals() {
        use crate::workflow::state::{Event, EventKind, ExitRecord, State, apply, replay};
        let mut passes = 0usize;
        let mut launches = 0usize;
        for seed in 1..=400u64 {
            let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            let p = random_program(&mut rng);
            let sched = Scheduler::new(&p);
            let mut journal = vec![Event {
                seq: 1,
                at_ms: 0,
                kind: EventKind::RunCreated {
                    run_id: "r".into(),
                    program_digest: "d".into(),
                    nodes: p.root.nodes.iter().map(|n| n.id.clone()).collect(),
                },
            }];
            let mut state = State::empty();
            apply(&mut state, &journal[0]).unwrap();
            let push = |state: &mut State, journal: &mut Vec<Event>, kind: EventKind| {
                let event = Event {
                    seq: journal.len() as u64 + 1,
                    at_ms: 0,
                    kind,
                };
                apply(state, &event).unwrap();
                journal.push(event);
            };
            loop {
                let spec = pass(&p, state.root());
                assert_eq!(sched.pass(&p, state.root()), spec, "seed {seed}");
                passes += 1;
                for d in spec.decisions {
                    push(
                        &mut state,
                        &mut journal,
                        EventKind::NodeStateChanged {
                            node: d.node,
                            state: d.state,
                            reason: d.reason,
                        },
                    );
                }
                for node in spec.launches {
                    launches += 1;
                    push(
                        &mut state,
                        &mut journal,
                        EventKind::LaunchIntended {
                            node,
                            attempt: 1,
                            cgroup: None,
                        },
                    );
                }
                let running: Vec<String> = state
                    .root()
                    .tasks
                    .iter()
                    .filter(|(_, t)| t.state == NodeState::Running)
                    .map(|(id, _)| id.clone())
                    .collect();
                if running.is_empty() {
                    break;
                }
                let node = running[rng.below(running.len())].clone();
                let (end, exit) = match rng.below(6) {
                    0 => (NodeState::Failure, Some(ExitRecord::Code { code: 1 })),
                    1 => (NodeState::Denial, None),
                    2 => (NodeState::Cancellation, Some(ExitRecord::Cancelled)),
                    3 => (NodeState::Failure, None),
                    _ => (NodeState::Success, Some(ExitRecord::Code { code: 0 })),
                };
                push(
                    &mut state,
                    &mut journal,
                    EventKind::AttemptFinished {
                        node,
                        attempt: 1,
                        state: end,
                        reason: None,
                        exit,
                        stdout: None,
                        stderr: None,
                        output: None,
                        output_artifact: None,
                    },
                );
            }
            // The journal replays to the state the walk built, and from it both agree.
            let replayed = replay(&journal).unwrap();
            assert_eq!(replayed, state, "seed {seed}");
            assert_eq!(
                sched.pass(&p, replayed.root()),
                pass(&p, replayed.root()),
                "seed {seed}"
            );
        }
        assert!(
            passes > 1500 && launches > 1000,
            "{passes} passes, {launches} launches"
        );
    }

    #[test]
    fn indexed_scheduler_falls_back_for_another_program_or_unsorted_nodes() {
        let small = program(vec![command_node("a", &[])], settings(4, 4, 4));
        let big = program(
            vec![command_node("a", &[]), command_node("b", &["a"])],
            settings(4, 4, 4),
        );
        let sched = Scheduler::new(&small);
        let s = scope(&big, &[("a", NodeState::Success)]);
        assert_eq!(sched.pass(&big, &s), pass(&big, &s));
        assert_eq!(decided(&sched.pass(&big, &s), "b"), Some(NodeState::Ready));
        // Nodes out of id order (never produced by the planner) still schedule correctly.
        let mut unsorted = big.clone();
        unsorted.root.nodes.reverse();
        let sched = Scheduler::new(&unsorted);
        assert_eq!(sched.pass(&unsorted, &s), pass(&unsorted, &s));
        assert_eq!(
            decided(&sched.pass(&unsorted, &s), "b"),
            Some(NodeState::Ready)
        );
    }
}
