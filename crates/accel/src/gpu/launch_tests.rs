//! The kernel declarations of `launch.rs` against the .cu sources: every
//! `extern "C" __global__` signature (those written out by a macro
//! included) is parsed and compared, parameter by parameter, name and C
//! type, with the Rust declaration. No GPU or NVRTC needed.

use std::collections::BTreeMap;

use super::super::abi;
use super::super::kernels::{expanded, SOURCES};
use super::{index_of, CType, NAMES, SIGNATURES};

type Params = Vec<(String, CType)>;

/// The text without comments, continuation lines joined.
fn clean(src: &str) -> String {
    src.replace("\\\n", " ")
        .lines()
        .map(|l| l.find("//").map_or(l, |i| &l[..i]))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The text from `open` (an opening parenthesis) to its match, exclusive.
fn balanced(s: &str, open: usize) -> Option<&str> {
    let mut depth = 0usize;
    for (i, c) in s[open..].char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return Some(&s[open + 1..open + i]);
                }
            }
            _ => {}
        }
    }
    None
}

/// Comma-separated items at parenthesis depth 0.
fn split_top(s: &str) -> Vec<String> {
    let (mut out, mut cur, mut depth) = (Vec::new(), String::new(), 0i32);
    for c in s.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(cur.trim().to_string());
                cur.clear();
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    if !cur.trim().is_empty() {
        out.push(cur.trim().to_string());
    }
    out
}

/// "const unsigned int* __restrict__ rk" -> ("rk", Ptr("unsigned int")).
fn param(p: &str) -> (String, CType) {
    let spaced = p.replace('*', " * ");
    let mut toks: Vec<&str> = spaced
        .split_whitespace()
        .filter(|t| *t != "const" && *t != "__restrict__")
        .collect();
    let name = toks.pop().unwrap_or_default().to_string();
    let ty = if toks.last() == Some(&"*") {
        toks.pop();
        CType::Ptr(leak(toks.join(" ")))
    } else {
        CType::Val(leak(toks.join(" ")))
    };
    (name, ty)
}

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

/// Every `extern "C" __global__ void [__launch_bounds__(..)] name(params)`.
fn kernels_in(text: &str) -> Vec<(String, Params)> {
    const HEAD: &str = "extern \"C\" __global__ void";
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(i) = text[at..].find(HEAD) {
        let mut rest = text[at + i + HEAD.len()..].trim_start();
        if let Some(r) = rest.strip_prefix("__launch_bounds__") {
            let open = r.find('(').expect("__launch_bounds__(");
            let inner = balanced(r, open).expect("balanced __launch_bounds__");
            rest = r[open + inner.len() + 2..].trim_start();
        }
        let open = rest.find('(').expect("parameter list");
        let name = rest[..open].trim().to_string();
        let params = balanced(rest, open).expect("balanced parameters");
        out.push((name, split_top(params).iter().map(|p| param(p)).collect()));
        at += i + HEAD.len();
    }
    out
}

/// The kernels of one compilation unit, those that function-like macros
/// write out included (`MACRO(name, ..)` at the start of a line).
fn signatures(src: &str) -> Vec<(String, Params)> {
    let text = clean(src);
    let mut plain = String::new();
    let mut macros: Vec<(String, Vec<String>, String)> = Vec::new();
    for line in text.lines() {
        if let Some(def) = line.trim_start().strip_prefix("#define ") {
            let name_end = def.find(|c: char| !(c.is_alphanumeric() || c == '_'));
            if let Some(e) = name_end.filter(|&e| def[e..].starts_with('(')) {
                let params = balanced(def, e).expect("macro parameters");
                let body = &def[e + params.len() + 2..];
                if body.contains("__global__") {
                    macros.push((def[..e].to_string(), split_top(params), body.to_string()));
                }
            }
        } else if !line.trim_start().starts_with('#') {
            plain.push_str(line);
            plain.push('\n');
        }
    }
    let mut out = kernels_in(&plain);
    for (name, params, body) in &macros {
        for line in plain.lines() {
            let Some(r) = line.trim_start().strip_prefix(name.as_str()) else {
                continue;
            };
            let Some(args) = r.starts_with('(').then(|| balanced(r, 0)).flatten() else {
                continue;
            };
            let args = split_top(args);
            let expanded: String = body
                .split_inclusive(|c: char| !(c.is_alphanumeric() || c == '_'))
                .map(|tok| {
                    let word = tok.trim_end_matches(|c: char| !(c.is_alphanumeric() || c == '_'));
                    match params.iter().position(|p| p == word) {
                        Some(k) => format!("{}{}", args[k], &tok[word.len()..]),
                        None => tok.to_string(),
                    }
                })
                .collect();
            out.extend(kernels_in(&expanded));
        }
    }
    out
}

/// Every kernel signature of every compilation unit, by name.
fn all_signatures() -> BTreeMap<String, Params> {
    let mut all: BTreeMap<String, Params> = BTreeMap::new();
    for src in SOURCES {
        for (name, params) in signatures(&expanded(src)) {
            if let Some(seen) = all.get(&name) {
                assert_eq!(seen, &params, "{name} differs between compilation units");
            }
            all.insert(name, params);
        }
    }
    all
}

fn declared(name: &str) -> Params {
    let (_, params) = SIGNATURES
        .iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("{name} is not declared in launch.rs"));
    params.iter().map(|&(n, t)| (n.to_string(), t)).collect()
}

#[test]
fn every_kernel_signature_matches_its_declaration() {
    let all = all_signatures();
    assert!(all.len() >= 30, "parsed only {} kernels", all.len());
    for (name, params) in &all {
        assert_eq!(
            &declared(name),
            params,
            "kernel {name}: launch.rs declares other parameters than the .cu signature"
        );
    }
    for name in NAMES {
        assert!(
            all.contains_key(*name),
            "{name} is declared but no .cu defines it"
        );
    }
}

#[test]
fn every_loaded_function_is_declared_and_every_declared_kernel_is_loaded() {
    let mut loaded: Vec<&str> = Vec::new();
    for src in SOURCES {
        let defined: Vec<String> = signatures(&expanded(src))
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        for f in src.functions {
            assert!(
                defined.iter().any(|d| d == f),
                "{}.cu does not define {f}",
                src.name
            );
            assert!(index_of(f).is_some(), "{f} is loaded but not declared");
            loaded.push(f);
        }
    }
    for name in NAMES {
        assert!(
            loaded.contains(name),
            "{name} is declared but no module loads it"
        );
    }
}

#[test]
fn the_parser_sees_types_names_order_and_macro_kernels() {
    let src = "#define K(NAME, T) extern \"C\" __global__ void __launch_bounds__(128) \\\n\
               NAME(const T* __restrict__ a, unsigned int n) { }\n\
               K(k_u8, unsigned char)\n\
               extern \"C\" __global__ void plain(long long d, // comment\n\
               unsigned long long* out) {}\n";
    let got = signatures(src);
    assert_eq!(
        got,
        vec![
            (
                "plain".to_string(),
                vec![
                    ("d".to_string(), CType::Val("long long")),
                    ("out".to_string(), CType::Ptr("unsigned long long")),
                ]
            ),
            (
                "k_u8".to_string(),
                vec![
                    ("a".to_string(), CType::Ptr("unsigned char")),
                    ("n".to_string(), CType::Val("unsigned int")),
                ]
            ),
        ]
    );
    // Swapped parameters of a real kernel do not match its declaration.
    let mut swapped = declared("gcm_ghash");
    swapped.swap(2, 3);
    assert_ne!(swapped, all_signatures()["gcm_ghash"]);
}

#[test]
fn every_descriptor_struct_layout_is_checked_by_the_kernels() {
    let units: Vec<String> = SOURCES.iter().map(expanded).collect();
    for (name, _, _) in abi::LAYOUTS {
        let check = format!("GV_CHECK_LAYOUT({name});");
        assert!(
            units.iter().any(|u| u.contains(&check)),
            "no kernel source checks the layout of {name}"
        );
        let defs = units
            .iter()
            .map(|u| u.matches(&format!("struct {name} {{")).count())
            .max()
            .unwrap_or(0);
        assert_eq!(defs, 1, "{name} is defined {defs} times in one unit");
    }
}
