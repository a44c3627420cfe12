//! How the audit's counters are spelled in `--json`'s `merge_state`: maps whose keys are not
//! strings as sorted lists of pairs, and trace ids as hex. Used by every accumulator's serde
//! attributes, so they sit below all of them.

/// Serialize a map with keys that are not strings as a list of `[key, value]` pairs, sorted by
/// key so that the output is the same from run to run.
pub(crate) mod pairs {
    use std::collections::HashMap;
    use std::hash::{BuildHasher, Hash};

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub(crate) fn serialize<K, V, H, S>(m: &HashMap<K, V, H>, s: S) -> Result<S::Ok, S::Error>
    where
        K: Serialize + Ord,
        V: Serialize,
        S: Serializer,
    {
        let mut v: Vec<(&K, &V)> = m.iter().collect();
        v.sort_by(|a, b| a.0.cmp(b.0));
        s.collect_seq(v)
    }

    pub(crate) fn deserialize<'de, K, V, H, D>(d: D) -> Result<HashMap<K, V, H>, D::Error>
    where
        K: Deserialize<'de> + Eq + Hash,
        H: BuildHasher + Default,
        V: Deserialize<'de>,
        D: Deserializer<'de>,
    {
        Vec::<(K, V)>::deserialize(d).map(|v| v.into_iter().collect())
    }
}

/// A trace id as OTLP JSON writes it (32 lowercase hex digits): JSON numbers stop at 64 bits.
pub(crate) mod hex_id {
    use serde::{Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(id: &Option<u128>, s: S) -> Result<S::Ok, S::Error> {
        match id {
            Some(id) => s.serialize_some(&format!("{id:032x}")),
            None => s.serialize_none(),
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u128>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|h| u128::from_str_radix(&h, 16).map_err(serde::de::Error::custom))
            .transpose()
    }
}
