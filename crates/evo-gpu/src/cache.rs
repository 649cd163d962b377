//! Content-addressed on-disk cache of NVRTC results.
//!
//! The key is the SHA-256 of the source, the option list (include paths excluded: they
//! name where the headers are, and the NVRTC version already pins what they hold), the
//! architecture and the NVRTC version. An entry is a folder `<key>/` with `meta.json`,
//! `kernel.ptx` and `kernel.cubin`, written to a temporary folder and renamed into
//! place, so readers never see half an entry. An entry that cannot be read is treated
//! as missing and rewritten.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Bumped when the entry layout changes; older entries are then ignored.
const FORMAT: u32 = 1;

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct EntryMeta {
    pub format: u32,
    pub success: bool,
    pub log: String,
    pub arch: String,
    pub options: Vec<String>,
    pub nvrtc_version: String,
    pub compile_ms: f64,
}

#[derive(Clone, Debug)]
pub struct CacheEntry {
    pub meta: EntryMeta,
    pub ptx: Option<String>,
    pub cubin: Option<Vec<u8>>,
}

#[derive(Clone, Debug)]
pub struct CompileCache {
    dir: PathBuf,
}

impl CompileCache {
    /// `$EVO_CACHE_DIR`, else `$XDG_CACHE_HOME/evo/nvrtc`, else `~/.cache/evo/nvrtc`,
    /// else `.evo-cache/nvrtc` in the current folder.
    pub fn default_dir() -> PathBuf {
        if let Some(d) = std::env::var_os("EVO_CACHE_DIR") {
            return PathBuf::from(d);
        }
        if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
            return PathBuf::from(d).join("evo/nvrtc");
        }
        if let Some(d) = std::env::var_os("HOME") {
            return PathBuf::from(d).join(".cache/evo/nvrtc");
        }
        PathBuf::from(".evo-cache/nvrtc")
    }

    pub fn new(dir: impl Into<PathBuf>) -> CompileCache {
        CompileCache { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn key(source: &str, options: &[String], arch: &str, nvrtc_version: &str) -> String {
        let mut h = Sha256::new();
        h.update(format!("evo-nvrtc-cache-v{FORMAT}\0"));
        h.update(source.as_bytes());
        h.update(b"\0");
        for o in options
            .iter()
            .filter(|o| !o.starts_with("-I") && !o.starts_with("--include-path"))
        {
            h.update(o.as_bytes());
            h.update(b"\x1f");
        }
        h.update(b"\0");
        h.update(arch.as_bytes());
        h.update(b"\0");
        h.update(nvrtc_version.as_bytes());
        hex::encode(h.finalize())
    }

    fn entry_dir(&self, key: &str) -> PathBuf {
        self.dir.join(&key[..2]).join(key)
    }

    pub fn get(&self, key: &str) -> Option<CacheEntry> {
        let dir = self.entry_dir(key);
        let meta: EntryMeta =
            serde_json::from_slice(&std::fs::read(dir.join("meta.json")).ok()?).ok()?;
        if meta.format != FORMAT {
            return None;
        }
        let ptx = std::fs::read_to_string(dir.join("kernel.ptx")).ok();
        let cubin = std::fs::read(dir.join("kernel.cubin")).ok();
        if meta.success && (ptx.is_none() || cubin.is_none()) {
            tracing::warn!(key, "incomplete cache entry; recompiling");
            return None;
        }
        Some(CacheEntry { meta, ptx, cubin })
    }

    pub fn put(&self, key: &str, entry: &CacheEntry) -> std::io::Result<()> {
        let final_dir = self.entry_dir(key);
        let parent = final_dir.parent().expect("entry dir has a parent");
        std::fs::create_dir_all(parent)?;
        let tmp = parent.join(format!(
            ".tmp-{key}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp)?;
        if let Some(ptx) = &entry.ptx {
            std::fs::write(tmp.join("kernel.ptx"), ptx)?;
        }
        if let Some(cubin) = &entry.cubin {
            std::fs::write(tmp.join("kernel.cubin"), cubin)?;
        }
        std::fs::write(
            tmp.join("meta.json"),
            serde_json::to_vec_pretty(&entry.meta).expect("meta serializes"),
        )?;
        if final_dir.exists() {
            // A broken entry (or a concurrent writer's identical one): replace it.
            let _ = std::fs::remove_dir_all(&final_dir);
        }
        match std::fs::rename(&tmp, &final_dir) {
            Ok(()) => Ok(()),
            Err(_) if final_dir.join("meta.json").is_file() => {
                let _ = std::fs::remove_dir_all(&tmp);
                Ok(())
            }
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> CacheEntry {
        CacheEntry {
            meta: EntryMeta {
                format: FORMAT,
                success: true,
                log: "ptxas info".into(),
                arch: "sm_90a".into(),
                options: vec!["-lineinfo".into()],
                nvrtc_version: "13.0".into(),
                compile_ms: 12.5,
            },
            ptx: Some(".version 9.0".into()),
            cubin: Some(vec![0x7f, b'E', b'L', b'F']),
        }
    }

    #[test]
    fn key_depends_on_everything_but_include_paths() {
        let o = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let base = CompileCache::key("src", &o(&["-lineinfo", "-I/a"]), "sm_90a", "13.0");
        assert_eq!(
            base,
            CompileCache::key("src", &o(&["-lineinfo", "-I/b"]), "sm_90a", "13.0")
        );
        assert_ne!(
            base,
            CompileCache::key("src2", &o(&["-lineinfo"]), "sm_90a", "13.0")
        );
        assert_ne!(base, CompileCache::key("src", &o(&[]), "sm_90a", "13.0"));
        assert_ne!(
            base,
            CompileCache::key("src", &o(&["-lineinfo"]), "sm_80", "13.0")
        );
        assert_ne!(
            base,
            CompileCache::key("src", &o(&["-lineinfo"]), "sm_90a", "13.1")
        );
    }

    #[test]
    fn round_trip_and_broken_entries() {
        let dir = tempfile::tempdir().unwrap();
        let cache = CompileCache::new(dir.path());
        let key = CompileCache::key("x", &[], "sm_90a", "13.0");
        assert!(cache.get(&key).is_none());
        cache.put(&key, &entry()).unwrap();
        let got = cache.get(&key).unwrap();
        assert_eq!(got.meta, entry().meta);
        assert_eq!(got.cubin, entry().cubin);
        // A truncated entry is a miss, and a new put repairs it.
        std::fs::remove_file(cache.entry_dir(&key).join("kernel.cubin")).unwrap();
        assert!(cache.get(&key).is_none());
        std::fs::write(cache.entry_dir(&key).join("meta.json"), b"{not json").unwrap();
        assert!(cache.get(&key).is_none());
        cache.put(&key, &entry()).unwrap();
        assert!(cache.get(&key).is_some());
    }
}
