//! Release versions as package registries order them (PEP 440: epoch, release numbers,
//! pre-, post- and dev-releases; a local label such as `+cpu` orders after its public
//! version). Enough to order what a registry lists and to pick the releases between two.

use std::cmp::Ordering;

/// A parsed version. Ordering is PEP 440's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    text: String,
    epoch: u64,
    release: Vec<u64>,
    /// (0 = a, 1 = b, 2 = rc, number)
    pre: Option<(u8, u64)>,
    post: Option<u64>,
    dev: Option<u64>,
    local: Option<String>,
}

impl Version {
    /// Parses `2.1.2`, `2.4.0rc1`, `1!2.0`, `2.5.0.post1`, `2.6.0.dev20240101`, `2.1.0+cpu`.
    pub fn parse(text: &str) -> Option<Version> {
        let original = text.trim();
        let lower = original.to_ascii_lowercase();
        let s = lower.strip_prefix('v').unwrap_or(&lower);
        let (s, local) = match s.split_once('+') {
            Some((a, b)) if !b.is_empty() => (a, Some(b.to_owned())),
            Some(_) => return None,
            None => (s, None),
        };
        let (epoch, s) = match s.split_once('!') {
            Some((e, rest)) => (e.parse().ok()?, rest),
            None => (0, s),
        };
        let bytes = s.as_bytes();
        let mut i = 0;
        let mut release = Vec::new();
        loop {
            let start = i;
            while i < bytes.len() && bytes[i].is_ascii_digit() {
                i += 1;
            }
            if start == i {
                return None;
            }
            release.push(s[start..i].parse().ok()?);
            if i < bytes.len()
                && bytes[i] == b'.'
                && bytes.get(i + 1).is_some_and(u8::is_ascii_digit)
            {
                i += 1;
            } else {
                break;
            }
        }
        let mut pre = None;
        let mut post = None;
        let mut dev = None;
        let mut rest = &s[i..];
        let number = |r: &str| -> (u64, usize) {
            let n = r.bytes().take_while(u8::is_ascii_digit).count();
            (r[..n].parse().unwrap_or(0), n)
        };
        while !rest.is_empty() {
            let r = rest.trim_start_matches(['.', '-', '_']);
            let tags: [(&str, Option<u8>); 9] = [
                ("alpha", Some(0)),
                ("beta", Some(1)),
                ("rc", Some(2)),
                ("c", Some(2)),
                ("a", Some(0)),
                ("b", Some(1)),
                ("post", None),
                ("dev", None),
                ("r", None),
            ];
            let (tag, kind) = tags.iter().find(|(t, _)| r.starts_with(t))?;
            let after = r[tag.len()..].trim_start_matches(['.', '-', '_']);
            let (n, used) = number(after);
            match (*tag, kind) {
                (_, Some(k)) if pre.is_none() && post.is_none() && dev.is_none() => {
                    pre = Some((*k, n))
                }
                ("post" | "r", None) if post.is_none() && dev.is_none() => post = Some(n),
                ("dev", None) if dev.is_none() => dev = Some(n),
                _ => return None,
            }
            rest = &after[used..];
        }
        Some(Version {
            text: original.to_owned(),
            epoch,
            release,
            pre,
            post,
            dev,
            local,
        })
    }

    /// The version as the registry spells it.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// An alpha, beta, release candidate or development release.
    pub fn is_prerelease(&self) -> bool {
        self.pre.is_some() || self.dev.is_some()
    }

    fn release_cmp(&self, other: &Version) -> Ordering {
        let n = self.release.len().max(other.release.len());
        (0..n)
            .map(|i| {
                let a = self.release.get(i).copied().unwrap_or(0);
                let b = other.release.get(i).copied().unwrap_or(0);
                a.cmp(&b)
            })
            .find(|o| o.is_ne())
            .unwrap_or(Ordering::Equal)
    }
}

impl Ord for Version {
    fn cmp(&self, other: &Self) -> Ordering {
        // A dev release of a final version comes before its pre-releases; a final release
        // after them; post-releases after the final one.
        let pre_key = |v: &Version| -> (u8, u64) {
            match (v.pre, v.post, v.dev) {
                (None, None, Some(_)) => (0, 0),
                (Some((k, n)), _, _) => (1 + k, n),
                _ => (9, 0),
            }
        };
        let post_key = |v: &Version| v.post.map_or(0, |p| p + 1);
        let dev_key = |v: &Version| v.dev.map_or(u64::MAX, |d| d);
        self.epoch
            .cmp(&other.epoch)
            .then_with(|| self.release_cmp(other))
            .then_with(|| pre_key(self).cmp(&pre_key(other)))
            .then_with(|| post_key(self).cmp(&post_key(other)))
            .then_with(|| dev_key(self).cmp(&dev_key(other)))
            .then_with(|| self.local.is_some().cmp(&other.local.is_some()))
            .then_with(|| self.local.cmp(&other.local))
    }
}

impl PartialOrd for Version {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// The releases from `listed` between `from` and `to` (both included, whichever is older
/// first), ordered from `from` towards `to`. Pre-releases are left out unless an end is one.
/// Unparseable entries are ignored; the ends are always included.
pub fn between(listed: &[String], from: &Version, to: &Version) -> Vec<Version> {
    let (lo, hi) = if from <= to { (from, to) } else { (to, from) };
    let with_pre = lo.is_prerelease() || hi.is_prerelease();
    let mut out: Vec<Version> = listed
        .iter()
        .filter_map(|s| Version::parse(s))
        .filter(|v| v > lo && v < hi && (with_pre || !v.is_prerelease()))
        .collect();
    out.push(lo.clone());
    out.push(hi.clone());
    out.sort();
    out.dedup_by(|a, b| (*a).cmp(b) == Ordering::Equal);
    if from > to {
        out.reverse();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        Version::parse(s).unwrap_or_else(|| panic!("{s} does not parse"))
    }

    #[test]
    fn orders_as_registries_do() {
        let mut list = vec![
            "2.10.0",
            "2.9.1",
            "2.1.0",
            "2.1.0rc1",
            "2.1.0.dev20230801",
            "2.1.0.post1",
            "2.1.0+cpu",
            "2.1",
            "1!0.1",
            "2.2.0b2",
            "2.2.0a1",
        ];
        list.sort_by_key(|a| v(a));
        assert_eq!(
            list,
            [
                "2.1.0.dev20230801",
                "2.1.0rc1",
                "2.1.0",
                "2.1",
                "2.1.0+cpu",
                "2.1.0.post1",
                "2.2.0a1",
                "2.2.0b2",
                "2.9.1",
                "2.10.0",
                "1!0.1"
            ]
        );
        assert_eq!(v("2.1").cmp(&v("2.1.0")), Ordering::Equal);
        assert!(v("2.4.0rc1").is_prerelease() && !v("2.4.0.post2").is_prerelease());
    }

    #[test]
    fn refuses_what_is_not_a_version() {
        for bad in ["", "latest", "2.x", "2..1", "2.1+", "2.1.0foo"] {
            assert!(Version::parse(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn releases_between_two_ends_in_search_order() {
        let listed: Vec<String> = [
            "2.0.1", "2.1.0", "2.1.2", "2.2.0rc1", "2.2.0", "2.3.1", "2.4.0", "garbage",
        ]
        .map(String::from)
        .to_vec();
        let names = |vs: Vec<Version>| vs.iter().map(|v| v.to_string()).collect::<Vec<_>>();
        assert_eq!(
            names(between(&listed, &v("2.1.0"), &v("2.3.1"))),
            ["2.1.0", "2.1.2", "2.2.0", "2.3.1"]
        );
        // Newer good end: the search goes downwards (which release fixed it).
        assert_eq!(
            names(between(&listed, &v("2.4.0"), &v("2.2.0"))),
            ["2.4.0", "2.3.1", "2.2.0"]
        );
        // Ends the registry does not list are still the ends.
        assert_eq!(
            names(between(&listed, &v("2.3.0"), &v("2.4.0"))),
            ["2.3.0", "2.3.1", "2.4.0"]
        );
    }
}
