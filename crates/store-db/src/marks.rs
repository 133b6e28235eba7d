//! Bind-parameter marks for statements built at run time (multi-row
//! inserts and updates, `IN` lists), written in the order the values are
//! bound: the one way such a statement is marked. Fixed statements write
//! `$1, $2, …` in text order, which both engines accept.
//!
//! SQLite gets anonymous `?` marks, never numbered or named ones (`$7`):
//! with those, every bind looks the mark's name up in a list, so binding a
//! statement is quadratic in its number of marks, and the multi-row
//! statements built here have hundreds. PostgreSQL gets `$1, $2, …`.
//! Statements built here must never mix the two forms, and must bind a
//! value for every mark, in text order (a value used twice is bound
//! twice).

use crate::Backend;

/// The marks of one statement, counted as they are written.
pub struct Marks {
    backend: Backend,
    bound: usize,
}

impl Marks {
    pub fn new(backend: Backend) -> Self {
        Marks { backend, bound: 0 }
    }

    /// The mark of the next bound value. (Not `Iterator::next`: the marks
    /// never end, and an `Option` would only make every caller unwrap.)
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> String {
        self.bound += 1;
        match self.backend {
            Backend::Sqlite => "?".to_owned(),
            Backend::Postgres => format!("${}", self.bound),
        }
    }

    /// `n` marks separated by commas.
    pub fn list(&mut self, n: usize) -> String {
        (0..n).map(|_| self.next()).collect::<Vec<_>>().join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_marks_are_anonymous_and_postgres_marks_count_on() {
        let mut lite = Marks::new(Backend::Sqlite);
        assert_eq!(lite.list(3), "?, ?, ?");
        let mut pg = Marks::new(Backend::Postgres);
        assert_eq!(pg.next(), "$1");
        assert_eq!(pg.list(2), "$2, $3");
    }
}
