//! The source tree's modules import each other without a circle, and
//! without glob imports (docs/ARCHITECTURE.md, "How the modules depend on
//! each other").
//!
//! Each file under `src/` is a node (a folder's `mod.rs` is the folder's
//! module). A file depends on another when it names an item defined there:
//! through a `use` (a re-export is a use too) or a `crate::…`/`super::…`
//! path in its code, followed through re-exports to the file that defines
//! the item. So a folder's `mod.rs` that re-exports its children defines
//! nothing its children use; what they share has a file of its own.
//!
//! The check reads the source as text: it knows `use` trees, paths, inline
//! modules and comments, which is all this crate's imports are written
//! with. Macros are not expanded.
//!
//! Test files follow one rule of the same kind: one that runs the binary
//! (it declares the `process` helper) requires the `cli` feature in
//! `Cargo.toml`, so the minimal feature set neither builds nor runs it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module: its path from the crate root (`["sources", "ingest", "grpc"]`).
type Module = Vec<String>;

struct Source {
    /// The file's code with comments and string contents blanked.
    code: String,
    /// Byte ranges of the inline modules (`mod tests { … }`).
    inline: Vec<(usize, usize)>,
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under `src/` but the binary's root, by module path.
fn sources() -> BTreeMap<Module, (PathBuf, Source)> {
    let mut files = BTreeMap::new();
    let mut stack = vec![repo().join("src")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("src/ is readable") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") || path.ends_with("src/main.rs") {
                continue;
            }
            let relative = path.strip_prefix(repo().join("src")).expect("under src/");
            let mut module: Module = relative
                .with_extension("")
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if module
                .last()
                .is_some_and(|last| last == "mod" || last == "lib")
            {
                module.pop();
            }
            let text = std::fs::read_to_string(&path).expect("a source file is UTF-8");
            files.insert(module, (path, parse(&text)));
        }
    }
    files
}

/// Blanks comments and the contents of string and character literals (so
/// that braces and paths inside them are not read as code).
fn blank(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < bytes.len() {
        let rest = &text[i..];
        if rest.starts_with("//") {
            let end = rest.find('\n').unwrap_or(rest.len());
            out.extend(std::iter::repeat_n(' ', end));
            i += end;
        } else if rest.starts_with("/*") {
            let end = rest.find("*/").map_or(rest.len(), |e| e + 2);
            out.extend(spaces(&rest[..end]));
            i += end;
        } else if let Some(end) = raw_string_end(rest) {
            out.push('"');
            out.extend(spaces(&rest[1..end - 1]));
            out.push('"');
            i += end;
        } else if rest.starts_with('"') {
            let mut j = 1;
            while j < rest.len() && rest.as_bytes()[j] != b'"' {
                j += if rest.as_bytes()[j] == b'\\' { 2 } else { 1 };
            }
            let end = (j + 1).min(rest.len());
            out.push('"');
            out.extend(spaces(&rest[1..end - 1]));
            out.push('"');
            i += end;
        } else if let Some(end) = char_literal_end(rest) {
            out.push_str("' '");
            out.extend(std::iter::repeat_n(' ', end - 3));
            i += end;
        } else {
            let c = rest.chars().next().expect("not at the end");
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// `text` with every character but its line ends replaced by a space.
fn spaces(text: &str) -> impl Iterator<Item = char> + '_ {
    text.chars().map(|c| if c == '\n' { '\n' } else { ' ' })
}

/// The length of the raw string literal `rest` starts with (`r"…"`, `r#"…"#`).
fn raw_string_end(rest: &str) -> Option<usize> {
    let after_r = rest.strip_prefix('r')?;
    let hashes = after_r.len() - after_r.trim_start_matches('#').len();
    let body = after_r[hashes..].strip_prefix('"')?;
    let close = format!("\"{}", "#".repeat(hashes));
    Some(1 + hashes + 1 + body.find(&close)? + close.len())
}

/// The length of the character literal `rest` starts with, if it is one
/// (not a lifetime).
fn char_literal_end(rest: &str) -> Option<usize> {
    let body = rest.strip_prefix('\'')?;
    let mut chars = body.char_indices();
    let (_, first) = chars.next()?;
    let close = if first == '\\' {
        body[1..].find('\'')? + 1
    } else {
        first.len_utf8()
    };
    (body[close..].starts_with('\'')).then_some(close + 2)
}

fn parse(text: &str) -> Source {
    let code = blank(text);
    let mut inline = Vec::new();
    let bytes = code.as_bytes();
    let mut search = 0;
    while let Some(at) = code[search..].find("mod ") {
        let start = search + at;
        search = start + 4;
        let word_start = start == 0 || !is_ident(bytes[start - 1]);
        let name_end = code[search..]
            .find(|c: char| !c.is_alphanumeric() && c != '_')
            .map_or(code.len(), |e| search + e);
        let after = code[name_end..].trim_start();
        if !word_start || name_end == search || !after.starts_with('{') {
            continue;
        }
        let open = code.len() - after.len();
        let mut depth = 0;
        for (i, &b) in bytes.iter().enumerate().skip(open) {
            match b {
                b'{' => depth += 1,
                b'}' => {
                    depth -= 1;
                    if depth == 0 {
                        inline.push((start, i));
                        break;
                    }
                }
                _ => {}
            }
        }
    }
    Source { code, inline }
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// One path a file names, at a byte offset.
struct Named {
    at: usize,
    segments: Vec<String>,
    /// From a `pub use`: a re-export.
    reexport: bool,
    /// The name it is imported as (`as`), if renamed.
    alias: Option<String>,
}

/// Expands a `use` tree (`a::{b, c::{d, e as f}}`) into its paths.
fn expand(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        return vec![tree.to_owned()];
    };
    let close = tree.rfind('}').expect("a use tree's braces close");
    let prefix = &tree[..open];
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, open + 1);
    for (i, c) in tree.char_indices().take(close).skip(open + 1) {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&tree[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&tree[start..close]);
    parts
        .into_iter()
        .filter(|p| !p.trim().is_empty())
        .flat_map(|p| expand(p).into_iter().map(move |q| format!("{prefix}{q}")))
        .collect()
}

/// Every `use` path and every `crate::`/`super::` path of a file.
fn named(source: &Source) -> Vec<Named> {
    let code = &source.code;
    let mut out = Vec::new();
    let mut in_use = Vec::new();
    let mut search = 0;
    while let Some(at) = code[search..].find("use ") {
        let start = search + at;
        search = start + 4;
        if start > 0 && is_ident(code.as_bytes()[start - 1]) {
            continue;
        }
        let before = code[..start].trim_end();
        let reexport = before.ends_with("pub")
            || before.ends_with(')') && {
                let open = before.rfind('(').unwrap_or(0);
                before[..open].trim_end().ends_with("pub")
            };
        let Some(end) = code[start..].find(';') else {
            continue;
        };
        let tree = &code[start + 4..start + end];
        in_use.push((start, start + end));
        for path in expand(tree) {
            let path: String = path
                .chars()
                .filter(|c| !c.is_whitespace() || *c == ' ')
                .collect();
            let (path, alias) = match path.split_once(" as ") {
                Some((path, alias)) => (path.to_owned(), Some(alias.trim().to_owned())),
                None => (path, None),
            };
            let segments = path
                .split("::")
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .collect();
            out.push(Named {
                at: start,
                segments,
                reexport,
                alias,
            });
        }
    }
    for head in ["crate::", "super::"] {
        let mut search = 0;
        while let Some(at) = code[search..].find(head) {
            let start = search + at;
            search = start + head.len();
            if start > 0
                && (is_ident(code.as_bytes()[start - 1]) || code.as_bytes()[start - 1] == b':')
            {
                continue;
            }
            if in_use.iter().any(|(a, b)| (*a..*b).contains(&start)) {
                continue;
            }
            let end = code[start..]
                .find(|c: char| !c.is_alphanumeric() && c != '_' && c != ':')
                .map_or(code.len(), |e| start + e);
            let segments = code[start..end]
                .split("::")
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect();
            out.push(Named {
                at: start,
                segments,
                reexport: false,
                alias: None,
            });
        }
    }
    out
}

struct Tree {
    files: BTreeMap<Module, (PathBuf, Source)>,
}

impl Tree {
    /// The absolute path of `segments`, named in `module` (inside an inline
    /// module when `inline`); None for another crate's path.
    fn absolute(&self, module: &Module, segments: &[String], inline: bool) -> Option<Vec<String>> {
        let (head, rest) = segments.split_first()?;
        let mut base: Module;
        let mut rest = rest.to_vec();
        match head.as_str() {
            "crate" => base = Vec::new(),
            "self" => base = module.clone(),
            "super" => {
                base = module.clone();
                if !inline {
                    base.pop();
                }
                while rest.first().is_some_and(|s| s == "super") {
                    base.pop();
                    rest.remove(0);
                }
            }
            _ => {
                let mut child = module.clone();
                child.push(head.clone());
                if !self.files.contains_key(&child) {
                    return None;
                }
                base = module.clone();
                rest = segments.to_vec();
            }
        }
        base.extend(rest);
        Some(base)
    }

    fn defines(&self, module: &Module, name: &str) -> bool {
        let code = &self.files[module].1.code;
        ["struct", "enum", "fn", "const", "type", "trait", "static", "union", "macro_rules!"]
            .iter()
            .any(|kind| {
                let needle = format!("{kind} {name}");
                code.match_indices(&needle).any(|(at, _)| {
                    let end = at + needle.len();
                    (at == 0 || !is_ident(code.as_bytes()[at - 1]))
                        && code.as_bytes().get(end).is_none_or(|b| !is_ident(*b))
                })
            })
            // A row of a declaring macro (`pub NAME: …` or `NAME = …`).
            || code.lines().any(|line| {
                let line = line.trim_start().trim_start_matches("pub(crate) ").trim_start_matches("pub ");
                line.strip_prefix(name).is_some_and(|rest| rest.starts_with(':') && !rest.starts_with("::"))
            })
    }

    /// The file that defines the item at `path`, following re-exports.
    fn resolve(&self, path: &[String], depth: usize) -> Option<Module> {
        let mut module = Vec::new();
        let mut at = 0;
        while at < path.len() {
            let mut next = module.clone();
            next.push(path[at].clone());
            if !self.files.contains_key(&next) {
                break;
            }
            module = next;
            at += 1;
        }
        let Some(name) = path.get(at) else {
            return Some(module);
        };
        if name == "*" || name == "self" || depth > 8 || self.defines(&module, name) {
            return Some(module);
        }
        for reexport in named(&self.files[&module].1)
            .into_iter()
            .filter(|n| n.reexport)
        {
            let last = reexport.segments.last()?;
            if last == name || reexport.alias.as_deref() == Some(name) {
                let absolute = self.absolute(&module, &reexport.segments, false)?;
                return self.resolve(&absolute, depth + 1);
            }
        }
        Some(module)
    }

    /// Every file's dependencies, with one path that makes each.
    fn edges(&self) -> BTreeMap<Module, BTreeMap<Module, String>> {
        let mut edges: BTreeMap<Module, BTreeMap<Module, String>> = BTreeMap::new();
        for (module, (_, source)) in &self.files {
            for named in named(source) {
                let inline = source
                    .inline
                    .iter()
                    .any(|(a, b)| (*a..*b).contains(&named.at));
                let Some(absolute) = self.absolute(module, &named.segments, inline) else {
                    continue;
                };
                let Some(target) = self.resolve(&absolute, 0) else {
                    continue;
                };
                if &target != module {
                    edges
                        .entry(module.clone())
                        .or_default()
                        .entry(target)
                        .or_insert_with(|| named.segments.join("::"));
                }
            }
        }
        edges
    }
}

fn shown(module: &Module) -> String {
    if module.is_empty() {
        "lib".to_owned()
    } else {
        module.join("/")
    }
}

/// The strongly connected components of more than one file (Tarjan's).
fn circles(
    edges: &BTreeMap<Module, BTreeMap<Module, String>>,
    nodes: &[Module],
) -> Vec<Vec<Module>> {
    struct State<'a> {
        edges: &'a BTreeMap<Module, BTreeMap<Module, String>>,
        index: BTreeMap<Module, usize>,
        low: BTreeMap<Module, usize>,
        stack: Vec<Module>,
        on_stack: BTreeSet<Module>,
        found: Vec<Vec<Module>>,
    }
    fn visit(state: &mut State<'_>, v: &Module) {
        let n = state.index.len();
        state.index.insert(v.clone(), n);
        state.low.insert(v.clone(), n);
        state.stack.push(v.clone());
        state.on_stack.insert(v.clone());
        let targets: Vec<Module> = state
            .edges
            .get(v)
            .map(|t| t.keys().cloned().collect())
            .unwrap_or_default();
        for w in targets {
            if !state.index.contains_key(&w) {
                visit(state, &w);
                let low = state.low[v].min(state.low[&w]);
                state.low.insert(v.clone(), low);
            } else if state.on_stack.contains(&w) {
                let low = state.low[v].min(state.index[&w]);
                state.low.insert(v.clone(), low);
            }
        }
        if state.low[v] == state.index[v] {
            let mut component = Vec::new();
            loop {
                let w = state.stack.pop().expect("on the stack");
                state.on_stack.remove(&w);
                let done = &w == v;
                component.push(w);
                if done {
                    break;
                }
            }
            if component.len() > 1 {
                state.found.push(component);
            }
        }
    }
    let mut state = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for node in nodes {
        if !state.index.contains_key(node) {
            visit(&mut state, node);
        }
    }
    state.found
}

#[test]
fn no_module_imports_itself_back() {
    let tree = Tree { files: sources() };
    let edges = tree.edges();
    let nodes: Vec<Module> = tree.files.keys().cloned().collect();
    let mut report = String::new();
    for component in circles(&edges, &nodes) {
        let members: BTreeSet<&Module> = component.iter().collect();
        report.push_str("\na circle:\n");
        for from in &component {
            for (to, how) in &edges[from] {
                if members.contains(to) {
                    report.push_str(&format!("  {} -> {} ({how})\n", shown(from), shown(to)));
                }
            }
        }
    }
    assert!(
        report.is_empty(),
        "modules that import each other back (move what they share into a file of its own):{report}"
    );
}

#[test]
fn imports_are_explicit() {
    let tree = Tree { files: sources() };
    let mut globs = Vec::new();
    for (path, source) in tree.files.values() {
        for named in named(source) {
            // A test module imports what it tests; a crate's prelude exists
            // to be imported whole (its traits' methods).
            let in_test_module = source
                .inline
                .iter()
                .any(|(a, b)| (*a..*b).contains(&named.at))
                || path.ends_with("tests.rs");
            let prelude = named.segments.iter().any(|s| s == "prelude");
            if named.segments.last().is_some_and(|s| s == "*") && !in_test_module && !prelude {
                let line = source.code[..named.at].lines().count() + 1;
                globs.push(format!(
                    "{}:{line}: use {}",
                    path.strip_prefix(repo()).unwrap_or(Path::new("")).display(),
                    named.segments.join("::")
                ));
            }
        }
    }
    assert!(
        globs.is_empty(),
        "glob imports hide where a name comes from; import each name:\n{}",
        globs.join("\n")
    );
}

/// The check finds a circle that is there: two files that use each other.
#[test]
fn a_circle_is_found() {
    let mut files = BTreeMap::new();
    let module = |name: &str| vec!["m".to_owned(), name.to_owned()];
    files.insert(
        vec!["m".to_owned()],
        (PathBuf::new(), parse("mod a;\nmod b;\n")),
    );
    files.insert(
        module("a"),
        (PathBuf::new(), parse("use super::b::B;\npub struct A;\n")),
    );
    files.insert(
        module("b"),
        (
            PathBuf::new(),
            parse("// use super::a::A;\npub struct B(crate::m::a::A);\n"),
        ),
    );
    files.insert(
        module("c"),
        (
            PathBuf::new(),
            parse("pub use super::a::A;\nfn f() -> &'static str { \"super::b::B\" }\n"),
        ),
    );
    let tree = Tree { files };
    let edges = tree.edges();
    let nodes: Vec<Module> = tree.files.keys().cloned().collect();
    assert_eq!(
        circles(&edges, &nodes),
        vec![vec![module("b"), module("a")]]
    );
    // The re-export is an edge; the path in a string is not.
    assert_eq!(
        edges[&module("c")].keys().collect::<Vec<_>>(),
        [&module("a")]
    );
}

/// A test file that declares `pub mod process;` runs the binary, which the
/// `cli` feature builds: without `required-features = ["cli"]`, the minimal
/// feature set's `cargo test` would run it again against a binary left by
/// an earlier build, or not find one.
#[test]
fn tests_that_run_the_binary_require_the_cli_feature() {
    let manifest = std::fs::read_to_string(repo().join("Cargo.toml")).unwrap();
    let gated: BTreeSet<&str> = manifest
        .split("[[test]]")
        .skip(1)
        .filter(|entry| {
            let entry = entry.split("\n[").next().unwrap_or(entry);
            entry.contains("required-features = [\"cli\"]")
        })
        .filter_map(|entry| entry.split("name = \"").nth(1)?.split('"').next())
        .collect();
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(repo().join("tests")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "rs")
            && std::fs::read_to_string(&path)
                .unwrap()
                .lines()
                .any(|line| line.trim() == "pub mod process;")
        {
            let name = path.file_stem().unwrap().to_string_lossy().into_owned();
            if !gated.contains(name.as_str()) {
                missing.push(name);
            }
        }
    }
    missing.sort();
    assert!(
        missing.is_empty(),
        "tests that run the binary without `required-features = [\"cli\"]` in Cargo.toml: {missing:?}"
    );
}
