//! What the ELF loader will open by path when a frozen native executable starts: its program
//! interpreter (`PT_INTERP`) and its library search path (`DT_RUNPATH`/`DT_RPATH`).
//!
//! The kernel and the loader open these by path after rho verified the executable, so
//! replacing one changes what runs. Planning therefore refuses an interpreter, or a search
//! path entry, that anyone but root could replace: the file (or the nearest existing
//! directory of an entry) and every directory above it must be owned by root and not
//! writable by group or others.
//!
//! Invariant: parsing reads only through the verified descriptor, bounds every offset and
//! size against the file, and a malformed header is an error, never "nothing to check".

use std::os::fd::BorrowedFd;
use std::os::unix::fs::{FileExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};

/// Program header types.
const PT_LOAD: u64 = 1;
const PT_DYNAMIC: u64 = 2;
const PT_INTERP: u64 = 3;

/// Largest dynamic section or string read (a real one is a few KiB).
const MAX_READ: u64 = 1 << 20;

/// The loader inputs of one ELF file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LoaderInputs {
    /// `PT_INTERP`, for a dynamically linked executable.
    pub interpreter: Option<String>,
    /// `DT_RUNPATH` and `DT_RPATH` entries, in order, as written (`$ORIGIN` unexpanded).
    pub search_path: Vec<String>,
}

struct Reader {
    file: std::fs::File,
    size: u64,
    little: bool,
    wide: bool,
}

impl Reader {
    fn bytes(&self, offset: u64, len: u64) -> Result<Vec<u8>, String> {
        if len > MAX_READ || offset.checked_add(len).is_none_or(|end| end > self.size) {
            return Err(format!(
                "a header points outside the file (offset {offset}, {len} bytes)"
            ));
        }
        let mut buf = vec![0_u8; usize::try_from(len).map_err(|_| "too large".to_owned())?];
        let mut done = 0;
        while done < buf.len() {
            match self.file.read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => return Err("the file ended early".to_owned()),
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("cannot read it: {e}")),
            }
        }
        Ok(buf)
    }

    fn uint(&self, bytes: &[u8], at: usize, width: usize) -> Result<u64, String> {
        let slice = bytes.get(at..at + width).ok_or("a header is truncated")?;
        let mut value = 0_u64;
        for i in 0..width {
            let byte = if self.little {
                slice[width - 1 - i]
            } else {
                slice[i]
            };
            value = (value << 8) | u64::from(byte);
        }
        Ok(value)
    }

    fn word(&self, bytes: &[u8], at: usize) -> Result<u64, String> {
        self.uint(bytes, at, if self.wide { 8 } else { 4 })
    }

    fn string(&self, offset: u64, limit: u64) -> Result<String, String> {
        let len = limit.min(self.size.saturating_sub(offset)).min(4096);
        let bytes = self.bytes(offset, len)?;
        let end = bytes
            .iter()
            .position(|b| *b == 0)
            .ok_or("a string is not terminated")?;
        String::from_utf8(bytes[..end].to_vec()).map_err(|_| "a path is not UTF-8".to_owned())
    }
}

/// Reads the loader inputs of the ELF file behind `fd` (`size` bytes).
pub fn loader_inputs(fd: BorrowedFd<'_>, size: u64) -> Result<LoaderInputs, String> {
    // A duplicate of the verified descriptor: positioned reads do not move its offset.
    let file = std::fs::File::from(
        fd.try_clone_to_owned()
            .map_err(|e| format!("cannot duplicate its descriptor: {e}"))?,
    );
    let mut r = Reader {
        file,
        size,
        little: true,
        wide: true,
    };
    let ident = r.bytes(0, 16)?;
    if &ident[..4] != b"\x7fELF" {
        return Err("not an ELF file".to_owned());
    }
    r.wide = match ident[4] {
        1 => false,
        2 => true,
        other => return Err(format!("unknown ELF class {other}")),
    };
    r.little = match ident[5] {
        1 => true,
        2 => false,
        other => return Err(format!("unknown ELF data encoding {other}")),
    };
    let header = r.bytes(0, if r.wide { 64 } else { 52 })?;
    let (phoff, phentsize, phnum) = if r.wide {
        (
            r.uint(&header, 32, 8)?,
            r.uint(&header, 54, 2)?,
            r.uint(&header, 56, 2)?,
        )
    } else {
        (
            r.uint(&header, 28, 4)?,
            r.uint(&header, 42, 2)?,
            r.uint(&header, 44, 2)?,
        )
    };
    let minimum = if r.wide { 56 } else { 32 };
    if phnum == 0 {
        return Ok(LoaderInputs::default());
    }
    if phentsize < minimum {
        return Err(format!("program header entries of {phentsize} bytes"));
    }
    let table = r.bytes(phoff, phentsize * phnum)?;
    // (type, offset, vaddr, filesz) of each program header.
    let mut segments = Vec::new();
    for i in 0..phnum {
        let at = usize::try_from(i * phentsize).map_err(|_| "too large")?;
        let kind = r.uint(&table, at, 4)?;
        let entry = if r.wide {
            (
                kind,
                r.uint(&table, at + 8, 8)?,
                r.uint(&table, at + 16, 8)?,
                r.uint(&table, at + 32, 8)?,
            )
        } else {
            (
                kind,
                r.uint(&table, at + 4, 4)?,
                r.uint(&table, at + 8, 4)?,
                r.uint(&table, at + 16, 4)?,
            )
        };
        segments.push(entry);
    }
    let mut inputs = LoaderInputs::default();
    if let Some(&(_, offset, _, size)) = segments.iter().find(|s| s.0 == PT_INTERP) {
        inputs.interpreter = Some(r.string(offset, size)?);
    }
    let Some(&(_, dyn_offset, _, dyn_size)) = segments.iter().find(|s| s.0 == PT_DYNAMIC) else {
        return Ok(inputs);
    };
    let dynamic = r.bytes(dyn_offset, dyn_size)?;
    let entry = if r.wide { 16 } else { 8 };
    let (mut strtab, mut paths) = (None, Vec::new());
    for at in (0..dynamic.len().saturating_sub(entry - 1)).step_by(entry) {
        let tag = r.word(&dynamic, at)?;
        let value = r.word(&dynamic, at + entry / 2)?;
        match tag {
            0 => break,
            5 => strtab = Some(value),
            15 | 29 => paths.push(value),
            _ => {}
        }
    }
    if paths.is_empty() {
        return Ok(inputs);
    }
    let strtab = strtab.ok_or("a search path without a string table")?;
    // The string table is given as an address: find the loaded segment holding it.
    let file_offset = segments
        .iter()
        .filter(|s| s.0 == PT_LOAD)
        .find(|s| strtab >= s.2 && strtab < s.2.saturating_add(s.3))
        .map(|s| s.1 + (strtab - s.2))
        .ok_or("the string table is in no loaded segment")?;
    for offset in paths {
        let text = r.string(file_offset.saturating_add(offset), 4096)?;
        inputs
            .search_path
            .extend(text.split(':').filter(|e| !e.is_empty()).map(str::to_owned));
    }
    Ok(inputs)
}

/// Who besides root could replace `path`: `None` when it and every directory above it are
/// owned by root and not writable by group or others; else the first offender and why.
pub fn replaceable_by_others(path: &Path) -> Option<String> {
    let mut current = Some(path);
    while let Some(p) = current {
        match std::fs::metadata(p) {
            Ok(meta) => {
                if meta.uid() != 0 {
                    return Some(format!(
                        "{} is owned by uid {}, not root",
                        p.display(),
                        meta.uid()
                    ));
                }
                if meta.mode() & 0o022 != 0 {
                    return Some(format!(
                        "{} is writable by {} (mode {:04o})",
                        p.display(),
                        if meta.mode() & 0o002 != 0 {
                            "everyone"
                        } else {
                            "its group"
                        },
                        meta.mode() & 0o7777
                    ));
                }
            }
            // A missing entry can be created by whoever may write the nearest existing
            // directory above it, which the next iterations check.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Some(format!("{} cannot be inspected: {e}", p.display())),
        }
        current = p.parent();
    }
    None
}

/// Checks what the loader of `executable` (at `location`) opens by path; `Err` names it.
pub fn check_loader(location: &Path, inputs: &LoaderInputs) -> Result<(), String> {
    if let Some(interpreter) = &inputs.interpreter {
        if !interpreter.starts_with('/') {
            return Err(format!(
                "its program interpreter `{interpreter}` is not an absolute path"
            ));
        }
        let resolved =
            std::fs::canonicalize(interpreter).unwrap_or_else(|_| PathBuf::from(interpreter));
        if let Some(why) = replaceable_by_others(&resolved) {
            return Err(format!(
                "its program interpreter `{interpreter}` could be replaced after planning ({why}); \
                 only an interpreter in root-owned directories that nobody else can write is \
                 accepted"
            ));
        }
    }
    let origin = location.parent().unwrap_or_else(|| Path::new("/"));
    for entry in &inputs.search_path {
        let expanded = entry
            .replace("${ORIGIN}", &origin.display().to_string())
            .replace("$ORIGIN", &origin.display().to_string());
        if expanded.contains('$') {
            return Err(format!(
                "its library search path entry `{entry}` uses a loader variable rho cannot \
                 resolve; relink it without RUNPATH/RPATH or with a fixed root-owned directory"
            ));
        }
        if !expanded.starts_with('/') {
            return Err(format!(
                "its library search path entry `{entry}` is relative to the directory the run \
                 starts in; relink it with an absolute root-owned directory"
            ));
        }
        if let Some(why) = replaceable_by_others(Path::new(&expanded)) {
            return Err(format!(
                "its library search path (RUNPATH/RPATH) entry `{entry}` is in a writable \
                 location ({why}): a library placed there after planning would run; relink it \
                 without that entry or install the libraries in a root-owned directory"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd as _;

    use super::*;

    #[test]
    fn a_system_binary_has_a_root_owned_interpreter() {
        let file = std::fs::File::open("/bin/true").unwrap();
        let size = file.metadata().unwrap().len();
        let inputs = loader_inputs(file.as_fd(), size).unwrap();
        let interpreter = inputs.interpreter.clone().expect("/bin/true is dynamic");
        assert!(interpreter.starts_with('/'), "{interpreter}");
        assert_eq!(check_loader(Path::new("/bin/true"), &inputs), Ok(()));
    }

    #[test]
    fn writable_interpreters_and_search_paths_are_refused() {
        let inputs = LoaderInputs {
            interpreter: Some("/tmp/ld.so".to_owned()),
            search_path: Vec::new(),
        };
        let err = check_loader(Path::new("/usr/bin/x"), &inputs).unwrap_err();
        assert!(err.contains("/tmp is writable by everyone"), "{err}");
        let inputs = LoaderInputs {
            interpreter: None,
            search_path: vec!["$ORIGIN/lib".to_owned()],
        };
        let err = check_loader(Path::new("/tmp/ws/bin/x"), &inputs).unwrap_err();
        assert!(
            err.contains("`$ORIGIN/lib` is in a writable location"),
            "{err}"
        );
        let inputs = LoaderInputs {
            interpreter: None,
            search_path: vec!["/usr/lib".to_owned(), "$LIB".to_owned()],
        };
        let err = check_loader(Path::new("/usr/bin/x"), &inputs).unwrap_err();
        assert!(err.contains("loader variable"), "{err}");
    }

    #[test]
    fn garbage_is_an_error_not_an_empty_answer() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x");
        std::fs::write(&path, b"\x7fELF\x02\x01\x01\x00garbage").unwrap();
        let file = std::fs::File::open(&path).unwrap();
        assert!(loader_inputs(file.as_fd(), 17).is_err());
    }
}
