//! Helpers shared by the importer tests.
#![allow(dead_code)]

/// A small deterministic generator (xorshift) for the mutation test.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Replace one random node of `v` (at most `max_depth - 1` levels down) with a value of another
/// type: a base set, then the format's own `extras`.
pub fn confuse(
    v: &mut serde_json::Value,
    rng: &mut Rng,
    max_depth: usize,
    extras: &[serde_json::Value],
) {
    let depth = rng.below(max_depth);
    confuse_at(v, rng, depth, extras);
}

fn confuse_at(
    v: &mut serde_json::Value,
    rng: &mut Rng,
    depth: usize,
    extras: &[serde_json::Value],
) {
    use serde_json::Value;
    if depth > 0 {
        match v {
            Value::Object(o) if !o.is_empty() => {
                let i = rng.below(o.len());
                if let Some(child) = o.values_mut().nth(i) {
                    return confuse_at(child, rng, depth - 1, extras);
                }
            }
            Value::Array(a) if !a.is_empty() => {
                let i = rng.below(a.len());
                if let Some(child) = a.get_mut(i) {
                    return confuse_at(child, rng, depth - 1, extras);
                }
            }
            _ => {}
        }
    }
    *v = match rng.below(6 + extras.len()) {
        0 => Value::Null,
        1 => Value::from(-1),
        2 => Value::from(1.5e300),
        3 => Value::from("x"),
        4 => Value::Array(vec![Value::Null]),
        n if n - 5 < extras.len() => extras[n - 5].clone(),
        _ => Value::Bool(true),
    };
}
