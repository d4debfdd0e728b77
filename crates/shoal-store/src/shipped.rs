//! Files shipped with a spec (`schemas/*/…_shipped_file.sql`, `shoal_model::shipped`), the same
//! in both stores: the statements, and the one rule for when the stored parts are a file.
//!
//! The store keeps parts; it does not hash them. The Scheduler checks a file's hash when its
//! last part arrives (and forgets the parts when they do not match), and every reader checks
//! it again before writing the file out.

use shoal_model::shipped;

pub(crate) const INSERT_SQLITE: &str =
    "INSERT OR IGNORE INTO shipped_file_part (sha256, part, size, data) VALUES (?, ?, ?, ?)";
pub(crate) const INSERT_MYSQL: &str =
    "INSERT IGNORE INTO shipped_file_part (sha256, part, size, data) VALUES (?, ?, ?, ?)";
pub(crate) const COUNT: &str = "SELECT COUNT(*) FROM shipped_file_part WHERE sha256 = ?";
pub(crate) const SELECT: &str =
    "SELECT part, size, data FROM shipped_file_part WHERE sha256 = ? ORDER BY part";
pub(crate) const DELETE: &str = "DELETE FROM shipped_file_part WHERE sha256 = ?";

/// The file the stored parts `(part, size, data)`, in part order, make: `None` unless they are
/// every part of one size, each of its length.
pub(crate) fn join(parts: Vec<(u32, u64, Vec<u8>)>) -> Option<Vec<u8>> {
    let size = parts.first()?.1;
    if parts.len() as u64 != u64::from(shipped::parts(size)) {
        return None;
    }
    let mut file = Vec::with_capacity(size as usize);
    for (i, (part, part_size, data)) in parts.into_iter().enumerate() {
        if part as usize != i
            || part_size != size
            || shipped::part_len(size, part) != Some(data.len())
        {
            return None;
        }
        file.extend_from_slice(&data);
    }
    Some(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_every_part_of_one_size_is_a_file() {
        let p = shipped::PART_BYTES;
        let size = (p + 3) as u64;
        let whole = || vec![(0, size, vec![1; p]), (1, size, vec![2; 3])];
        assert_eq!(join(whole()).unwrap().len(), p + 3);
        assert_eq!(join(vec![]), None);
        assert_eq!(join(whole()[..1].to_vec()), None, "a part missing");
        let mut other_size = whole();
        other_size[1].1 = size + 1;
        assert_eq!(join(other_size), None);
        let mut short = whole();
        short[1].2.pop();
        assert_eq!(join(short), None);
        assert_eq!(join(vec![(0, 0, vec![])]), Some(vec![]));
    }
}
