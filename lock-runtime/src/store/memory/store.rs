//! The keyspace: strings, hashes and sorted sets, with expiry in
//! milliseconds.
//!
//! A key whose expiry time `t` has passed (`now > t`, as in Redis) is gone:
//! lookups drop it lazily, and [`Store::sweep`], run before every command,
//! drops every expired key from an index ordered by expiry time, so memory
//! does not grow with keys nobody reads again.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ops::Bound;

/// The value of one key.
#[derive(Debug, Clone)]
pub(crate) enum Data {
    Str(Vec<u8>),
    /// Fields in byte order (Redis keeps small hashes in insertion order:
    /// HGETALL's order is unspecified either way).
    Hash(BTreeMap<Vec<u8>, Vec<u8>>),
    ZSet(ZSet),
}

impl Data {
    /// The name TYPE reports.
    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            Data::Str(_) => "string",
            Data::Hash(_) => "hash",
            Data::ZSet(_) => "zset",
        }
    }

    fn is_empty(&self) -> bool {
        match self {
            Data::Str(_) => false,
            Data::Hash(hash) => hash.is_empty(),
            Data::ZSet(set) => set.len() == 0,
        }
    }
}

#[derive(Debug)]
struct Entry {
    data: Data,
    /// Unix time in ms after which the key is gone.
    expires_at: Option<i64>,
}

#[derive(Debug, Default)]
pub(crate) struct Store {
    entries: HashMap<Vec<u8>, Entry>,
    /// Every key with an expiry, by expiry time.
    expiries: BTreeSet<(i64, Vec<u8>)>,
}

impl Store {
    /// Drops every key that expired before `now`.
    pub(crate) fn sweep(&mut self, now: i64) {
        while let Some((at, _)) = self.expiries.first() {
            if *at >= now {
                break;
            }
            if let Some((_, key)) = self.expiries.pop_first() {
                self.entries.remove(&key);
            }
        }
    }

    /// Drops `key` if it has expired; whether it exists afterwards.
    fn expire_if_due(&mut self, key: &[u8], now: i64) -> bool {
        match self.entries.get(key) {
            None => false,
            Some(Entry {
                expires_at: Some(at),
                ..
            }) if *at < now => {
                self.remove(key);
                false
            }
            Some(_) => true,
        }
    }

    pub(crate) fn get(&mut self, key: &[u8], now: i64) -> Option<&Data> {
        self.expire_if_due(key, now);
        self.entries.get(key).map(|entry| &entry.data)
    }

    pub(crate) fn get_mut(&mut self, key: &[u8], now: i64) -> Option<&mut Data> {
        self.expire_if_due(key, now);
        self.entries.get_mut(key).map(|entry| &mut entry.data)
    }

    /// The value at `key`, created with `create` if missing (keeping any
    /// expiry of an existing key).
    pub(crate) fn get_or_insert(
        &mut self,
        key: &[u8],
        now: i64,
        create: impl FnOnce() -> Data,
    ) -> &mut Data {
        self.expire_if_due(key, now);
        &mut self
            .entries
            .entry(key.to_vec())
            .or_insert_with(|| Entry {
                data: create(),
                expires_at: None,
            })
            .data
    }

    /// Stores `data` at `key`, dropping any expiry (as SET does).
    pub(crate) fn insert(&mut self, key: &[u8], data: Data) {
        self.remove(key);
        self.entries.insert(
            key.to_vec(),
            Entry {
                data,
                expires_at: None,
            },
        );
    }

    pub(crate) fn remove(&mut self, key: &[u8]) -> bool {
        match self.entries.remove(key) {
            Some(entry) => {
                if let Some(at) = entry.expires_at {
                    self.expiries.remove(&(at, key.to_vec()));
                }
                true
            }
            None => false,
        }
    }

    /// Removes `key` if its hash or sorted set has become empty (Redis never
    /// keeps an empty one).
    pub(crate) fn remove_if_empty(&mut self, key: &[u8]) {
        if self
            .entries
            .get(key)
            .is_some_and(|entry| entry.data.is_empty())
        {
            self.remove(key);
        }
    }

    pub(crate) fn exists(&mut self, key: &[u8], now: i64) -> bool {
        self.expire_if_due(key, now)
    }

    /// The expiry of a live key: `None` if the key is missing, `Some(None)`
    /// if it never expires.
    pub(crate) fn expiry(&mut self, key: &[u8], now: i64) -> Option<Option<i64>> {
        self.expire_if_due(key, now);
        self.entries.get(key).map(|entry| entry.expires_at)
    }

    /// Sets or clears the expiry of an existing key; whether it exists.
    pub(crate) fn set_expiry(&mut self, key: &[u8], at: Option<i64>) -> bool {
        let Some(entry) = self.entries.get_mut(key) else {
            return false;
        };
        if let Some(old) = entry.expires_at {
            self.expiries.remove(&(old, key.to_vec()));
        }
        entry.expires_at = at;
        if let Some(at) = at {
            self.expiries.insert((at, key.to_vec()));
        }
        true
    }

    /// Every live key.
    pub(crate) fn keys(&mut self, now: i64) -> Vec<Vec<u8>> {
        self.sweep(now);
        let mut keys: Vec<Vec<u8>> = self.entries.keys().cloned().collect();
        keys.sort();
        keys
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    pub(crate) fn expiring(&self) -> usize {
        self.expiries.len()
    }

    pub(crate) fn clear(&mut self) {
        self.entries.clear();
        self.expiries.clear();
    }
}

/// A sorted set: members ordered by score, then by their bytes.
#[derive(Debug, Clone, Default)]
pub(crate) struct ZSet {
    scores: HashMap<Vec<u8>, f64>,
    order: BTreeSet<(Score, Vec<u8>)>,
}

/// A score: never NaN, so totally ordered (`-0` equals `0`, as in C).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Score(pub(crate) f64);

impl PartialEq for Score {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Score {}

impl PartialOrd for Score {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Score {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.partial_cmp(&other.0).unwrap_or(Ordering::Equal)
    }
}

/// A score range: `(value, exclusive)` at each end.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ScoreRange {
    pub(crate) min: (f64, bool),
    pub(crate) max: (f64, bool),
}

impl ScoreRange {
    fn above_min(&self, score: f64) -> bool {
        if self.min.1 {
            score > self.min.0
        } else {
            score >= self.min.0
        }
    }

    fn below_max(&self, score: f64) -> bool {
        if self.max.1 {
            score < self.max.0
        } else {
            score <= self.max.0
        }
    }
}

impl ZSet {
    pub(crate) fn len(&self) -> usize {
        self.scores.len()
    }

    pub(crate) fn score(&self, member: &[u8]) -> Option<f64> {
        self.scores.get(member).copied()
    }

    /// Adds `member` or moves it to `score`.
    pub(crate) fn insert(&mut self, member: &[u8], score: f64) {
        if let Some(old) = self.scores.insert(member.to_vec(), score) {
            self.order.remove(&(Score(old), member.to_vec()));
        }
        self.order.insert((Score(score), member.to_vec()));
    }

    pub(crate) fn remove(&mut self, member: &[u8]) -> bool {
        match self.scores.remove(member) {
            Some(score) => {
                self.order.remove(&(Score(score), member.to_vec()));
                true
            }
            None => false,
        }
    }

    /// Members and scores at ranks `start..=stop` (already clamped), lowest
    /// first, or highest first when `reverse`.
    pub(crate) fn by_rank(&self, start: usize, stop: usize, reverse: bool) -> Vec<(Vec<u8>, f64)> {
        let count = stop + 1 - start;
        let pair = |(score, member): &(Score, Vec<u8>)| (member.clone(), score.0);
        if reverse {
            self.order
                .iter()
                .rev()
                .skip(start)
                .take(count)
                .map(pair)
                .collect()
        } else if start > self.len() / 2 {
            // Near the end (ZRANGE key -1 -1): walk from the back.
            let mut items: Vec<_> = self
                .order
                .iter()
                .rev()
                .skip(self.len() - 1 - stop)
                .take(count)
                .map(pair)
                .collect();
            items.reverse();
            items
        } else {
            self.order
                .iter()
                .skip(start)
                .take(count)
                .map(pair)
                .collect()
        }
    }

    /// Members and scores within `range`, lowest first (or highest first).
    pub(crate) fn by_score(&self, range: ScoreRange, reverse: bool) -> Vec<(Vec<u8>, f64)> {
        let in_range = self
            .order
            .range((
                Bound::Included((Score(range.min.0), Vec::new())),
                Bound::Unbounded,
            ))
            .skip_while(|(score, _)| !range.above_min(score.0))
            .take_while(|(score, _)| range.below_max(score.0))
            .map(|(score, member)| (member.clone(), score.0));
        if reverse {
            let mut items: Vec<_> = in_range.collect();
            items.reverse();
            items
        } else {
            in_range.collect()
        }
    }

    /// How many members lie within `range`.
    pub(crate) fn count(&self, range: ScoreRange) -> usize {
        self.order
            .range((
                Bound::Included((Score(range.min.0), Vec::new())),
                Bound::Unbounded,
            ))
            .skip_while(|(score, _)| !range.above_min(score.0))
            .take_while(|(score, _)| range.below_max(score.0))
            .count()
    }
}

/// Redis's glob match (`stringmatchlen`) for KEYS and SCAN MATCH: `*`, `?`,
/// `[abc]`, `[^a-z]`, and `\` to escape.
pub(crate) fn glob_match(pattern: &[u8], text: &[u8]) -> bool {
    match pattern.split_first() {
        None => text.is_empty(),
        Some((b'*', rest)) => {
            let rest = {
                let mut rest = rest;
                while let [b'*', more @ ..] = rest {
                    rest = more;
                }
                rest
            };
            if rest.is_empty() {
                return true;
            }
            (0..=text.len()).any(|skip| glob_match(rest, &text[skip..]))
        }
        Some((b'?', rest)) => !text.is_empty() && glob_match(rest, &text[1..]),
        Some((b'[', rest)) => {
            let Some((&c, text_rest)) = text.split_first() else {
                return false;
            };
            let (negate, mut class) = match rest {
                [b'^', more @ ..] => (true, more),
                _ => (false, rest),
            };
            let mut matched = false;
            loop {
                match class {
                    [] => break,
                    [b']', more @ ..] => {
                        class = more;
                        break;
                    }
                    [b'\\', escaped, more @ ..] => {
                        matched |= *escaped == c;
                        class = more;
                    }
                    [low, b'-', high, more @ ..] if *high != b']' => {
                        let (low, high) = if low <= high {
                            (*low, *high)
                        } else {
                            (*high, *low)
                        };
                        matched |= (low..=high).contains(&c);
                        class = more;
                    }
                    [single, more @ ..] => {
                        matched |= *single == c;
                        class = more;
                    }
                }
            }
            matched != negate && glob_match(class, text_rest)
        }
        Some((b'\\', [escaped, rest @ ..])) => {
            text.first() == Some(escaped) && glob_match(rest, &text[1..])
        }
        Some((literal, rest)) => text.first() == Some(literal) && glob_match(rest, &text[1..]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_expire_strictly_after_their_time() {
        let mut store = Store::default();
        store.insert(b"k", Data::Str(b"v".to_vec()));
        store.set_expiry(b"k", Some(100));
        assert!(store.exists(b"k", 100));
        assert!(!store.exists(b"k", 101));
        assert_eq!(store.len(), 0);
        assert_eq!(store.expiring(), 0);
    }

    #[test]
    fn the_sweep_drops_expired_keys_nobody_reads() {
        let mut store = Store::default();
        for i in 0..100u8 {
            store.insert(&[i], Data::Str(vec![i]));
            store.set_expiry(&[i], Some(i64::from(i)));
        }
        store.insert(b"forever", Data::Str(vec![]));
        store.sweep(50);
        assert_eq!(store.len(), 51); // 50..=99 and "forever"
        store.sweep(1000);
        assert_eq!(store.len(), 1);
        assert_eq!(store.expiring(), 0);
    }

    #[test]
    fn sorted_sets_order_by_score_then_member() {
        let mut set = ZSet::default();
        set.insert(b"b", 1.0);
        set.insert(b"a", 1.0);
        set.insert(b"c", 0.5);
        set.insert(b"c", 2.0);
        let members = |items: Vec<(Vec<u8>, f64)>| -> Vec<Vec<u8>> {
            items.into_iter().map(|(member, _)| member).collect()
        };
        assert_eq!(
            members(set.by_rank(0, 2, false)),
            [b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]
        );
        assert_eq!(members(set.by_rank(2, 2, false)), [b"c".to_vec()]);
        assert_eq!(members(set.by_rank(0, 0, true)), [b"c".to_vec()]);
        let range = ScoreRange {
            min: (1.0, true),
            max: (f64::INFINITY, false),
        };
        assert_eq!(members(set.by_score(range, false)), [b"c".to_vec()]);
        let range = ScoreRange {
            min: (1.0, false),
            max: (2.0, true),
        };
        assert_eq!(set.count(range), 2);
    }

    #[test]
    fn globs_match_like_redis() {
        assert!(glob_match(b"*", b""));
        assert!(glob_match(b"lock:*", b"lock:{a}"));
        assert!(!glob_match(b"lock:*", b"lox"));
        assert!(glob_match(b"h?llo", b"hello"));
        assert!(glob_match(b"h[ae]llo", b"hallo"));
        assert!(!glob_match(b"h[^e]llo", b"hello"));
        assert!(glob_match(b"h[a-c]llo", b"hbllo"));
        assert!(glob_match(b"a\\*b", b"a*b"));
        assert!(!glob_match(b"a\\*b", b"axb"));
        assert!(glob_match(b"*:released", b"lock:{x}:released"));
    }
}
