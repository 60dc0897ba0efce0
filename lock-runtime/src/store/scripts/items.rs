//! A call's keys and arguments, written one after another into one buffer.
//!
//! A call is built for every lock taken and every lock given back, and its
//! keys are mostly the lock's key with a suffix (`lock:{a}:released`). Kept
//! as a string each, they cost an allocation per key and argument, and a
//! formatting pass per suffix; here they cost two allocations per call
//! whatever their number, and are copied once more only into the command.

use std::fmt::Write as _;

/// The keys, then the arguments, of one call (see the module docs).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Items {
    text: String,
    /// Where each item ends in `text`.
    ends: Vec<u32>,
    /// How many of the items, from the first, are keys.
    keys: usize,
}

impl Items {
    /// Room for about `items` items of about `bytes` bytes in all.
    pub(crate) fn with_capacity(items: usize, bytes: usize) -> Items {
        Items {
            text: String::with_capacity(bytes),
            ends: Vec::with_capacity(items),
            keys: 0,
        }
    }

    /// Adds a key made of `parts` written one after the other. Every key
    /// comes before every argument.
    pub(crate) fn key(&mut self, parts: &[&str]) -> &mut Self {
        debug_assert_eq!(self.keys, self.ends.len(), "a key after an argument");
        self.push(parts);
        self.keys += 1;
        self
    }

    /// Adds an argument made of `parts` written one after the other.
    pub(crate) fn arg(&mut self, parts: &[&str]) -> &mut Self {
        self.push(parts);
        self
    }

    /// Adds a number as an argument.
    pub(crate) fn number(&mut self, number: u64) -> &mut Self {
        let _ = write!(self.text, "{number}");
        self.end();
        self
    }

    fn push(&mut self, parts: &[&str]) {
        for part in parts {
            self.text.push_str(part);
        }
        self.end();
    }

    fn end(&mut self) {
        let end = u32::try_from(self.text.len()).expect("a call's text fits in 4 GiB");
        self.ends.push(end);
    }

    /// The item at `index`.
    fn item(&self, index: usize) -> &str {
        let start = index.checked_sub(1).map_or(0, |before| self.ends[before]);
        &self.text[start as usize..self.ends[index] as usize]
    }

    /// The keys, in order.
    pub(crate) fn keys(&self) -> impl ExactSizeIterator<Item = &str> + Clone {
        (0..self.keys).map(|index| self.item(index))
    }

    /// The arguments, in order.
    pub(crate) fn args(&self) -> impl ExactSizeIterator<Item = &str> + Clone {
        (self.keys..self.ends.len()).map(|index| self.item(index))
    }

    /// How many bytes the keys and arguments take.
    pub(crate) fn bytes(&self) -> usize {
        self.text.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_come_back_as_they_were_written() {
        let mut items = Items::with_capacity(1, 1);
        items
            .key(&["lock:{a}"])
            .key(&["lock:{a}", ":released"])
            .key(&[""])
            .arg(&["owner:", "7"])
            .number(30_000)
            .arg(&[]);
        let keys: Vec<&str> = items.keys().collect();
        let args: Vec<&str> = items.args().collect();
        assert_eq!(keys, ["lock:{a}", "lock:{a}:released", ""]);
        assert_eq!(args, ["owner:7", "30000", ""]);
        assert_eq!(items.bytes(), 8 + 17 + 7 + 5);
        assert_eq!(Items::default().keys().len(), 0);
        assert_eq!(Items::default().args().len(), 0);
    }
}
