//! Digests: `sha256:` + lowercase hex, domain-separated so a program digest can never be
//! confused with a graph digest or a file digest.
//!
//! Invariant: a digest is computed over canonical bytes only, never over JSON.

use sha2::{Digest as _, Sha256};

use crate::canonical::{self, CanonicalError};
use crate::program::{
    FrozenProgram, NodeKind, PROGRAM_FORMAT_VERSION, Reference, Schema, Template,
};

/// Lowercase hex of SHA-256 over `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest: [u8; 32] = Sha256::digest(bytes).into();
    hex(&digest)
}

/// `sha256:` + lowercase hex of SHA-256 over `bytes`.
pub fn sha256_tagged(bytes: &[u8]) -> String {
    format!("sha256:{}", sha256_hex(bytes))
}

/// Lowercase hex of bytes.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    out
}

fn domain_digest(domain: &str, canonical_bytes: &[u8]) -> String {
    let mut hasher = Sha256::new();
    hasher.update(domain.as_bytes());
    hasher.update([0u8]);
    hasher.update(PROGRAM_FORMAT_VERSION.to_be_bytes());
    hasher.update(canonical_bytes);
    let digest: [u8; 32] = hasher.finalize().into();
    format!("sha256:{}", hex(&digest))
}

/// The canonical encoding of a program (what `program.cbor` holds).
pub fn encode_program(program: &FrozenProgram) -> Result<Vec<u8>, CanonicalError> {
    canonical::to_canonical_bytes(program)
}

/// `program_digest` over already-encoded canonical program bytes.
pub fn program_digest_of_bytes(canonical_program: &[u8]) -> String {
    domain_digest("rho-program", canonical_program)
}

/// `program_digest` of a program.
pub fn program_digest(program: &FrozenProgram) -> Result<String, CanonicalError> {
    Ok(program_digest_of_bytes(&encode_program(program)?))
}

/// The flat graph view of the root scope, for consumers that read `graph_digest`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GraphView {
    /// Nodes with their kind, needs and flags, sorted by id.
    pub nodes: Vec<GraphNode>,
    /// Output schemas by node.
    pub outputs: std::collections::BTreeMap<String, Schema>,
    /// Nodes that produce a command exit.
    pub exits: Vec<String>,
    /// Nodes whose completion is recorded (every node).
    pub completions: Vec<String>,
    /// The outcome vocabulary.
    pub outcomes: Vec<String>,
}

/// One node of the graph view.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GraphNode {
    /// The id.
    pub id: String,
    /// `agent`, `command` or `shell`.
    pub kind: NodeKind,
    /// Sorted needs.
    pub needs: Vec<String>,
    /// Whether the node has a condition.
    pub conditional: bool,
    /// The nodes its condition and templates read.
    pub reads: Vec<String>,
    /// `allow_failure`.
    pub allow_failure: bool,
}

/// Builds the graph view of a program's root scope.
pub fn graph_view(program: &FrozenProgram) -> GraphView {
    let mut outputs = std::collections::BTreeMap::new();
    let mut exits = Vec::new();
    let mut nodes = Vec::with_capacity(program.root.nodes.len());
    for node in &program.root.nodes {
        if let Some(schema) = &node.output {
            outputs.insert(node.id.clone(), schema.clone());
        }
        if node.kind() != NodeKind::Agent {
            exits.push(node.id.clone());
        }
        let mut reads: Vec<String> = node
            .when
            .iter()
            .flat_map(crate::program::Condition::references)
            .map(Reference::node)
            .map(str::to_owned)
            .collect();
        match &node.execution {
            crate::program::Execution::Agent { prompt, .. } => {
                reads.extend(prompt.references().map(|r| r.node().to_owned()));
            }
            crate::program::Execution::Command { args, .. } => {
                reads.extend(
                    args.iter()
                        .flat_map(Template::references)
                        .map(|r| r.node().to_owned()),
                );
            }
            crate::program::Execution::Shell { .. } => {}
        }
        reads.sort();
        reads.dedup();
        nodes.push(GraphNode {
            id: node.id.clone(),
            kind: node.kind(),
            needs: node.needs.clone(),
            conditional: node.when.is_some(),
            reads,
            allow_failure: node.allow_failure,
        });
    }
    GraphView {
        completions: nodes.iter().map(|n| n.id.clone()).collect(),
        nodes,
        outputs,
        exits,
        outcomes: ["success", "failure", "denial", "cancellation", "blocked"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect(),
    }
}

/// `graph_digest` of a program.
pub fn graph_digest(program: &FrozenProgram) -> Result<String, CanonicalError> {
    let bytes = canonical::to_canonical_bytes(&graph_view(program))?;
    Ok(domain_digest("rho-graph", &bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_is_lowercase_and_complete() {
        assert_eq!(hex(&[0x00, 0xab, 0xff]), "00abff");
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
