//! The SQL dialects the store speaks; each module that writes SQL for both backends matches on
//! it for the few places they differ.

/// The SQL dialects the store speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Postgres,
    Sqlite,
}

impl Dialect {
    /// The `n`th bind parameter (1-based): `$n` or `?n`.
    pub fn param(self, n: usize) -> String {
        match self {
            Dialect::Postgres => format!("${n}"),
            Dialect::Sqlite => format!("?{n}"),
        }
    }

    /// The `n`th bind parameter, epoch milliseconds, as the dialect's time.
    pub fn time_param(self, n: usize) -> String {
        match self {
            Dialect::Postgres => format!("to_timestamp(${n}::bigint / 1000.0)"),
            Dialect::Sqlite => format!("?{n}"),
        }
    }

    /// The `n`th bind parameter typed as `ty` where the dialect needs the type to plan a
    /// `… IS NULL` test (PostgreSQL), as it is otherwise.
    pub fn typed_param(self, n: usize, ty: &str) -> String {
        match self {
            Dialect::Postgres => format!("${n}::{ty}"),
            Dialect::Sqlite => format!("?{n}"),
        }
    }

    /// The condition that selects one cluster's rows by the `n`th bind parameter when `named`;
    /// otherwise the parameter is bound NULL and tested (typed: PostgreSQL plans the test), so
    /// a read of one cluster and a read of every cluster bind the same parameters.
    pub fn of_cluster(self, n: usize, named: bool) -> String {
        if named {
            format!("cluster = {}", self.param(n))
        } else {
            format!("{} IS NULL", self.typed_param(n, "text"))
        }
    }

    /// The condition that keeps the rows of the nodes in the `n`th bind parameter (a list
    /// from [`Dialect::node_list`]) when `given`; otherwise the parameter is bound NULL and
    /// tested, as [`Dialect::of_cluster`] does.
    pub fn of_nodes(self, n: usize, given: bool) -> String {
        match (self, given) {
            // Node names are DNS-1123 subdomains (model::names): never a comma.
            (Dialect::Postgres, true) => format!("node = ANY(string_to_array(${n}::text, ','))"),
            (Dialect::Sqlite, true) => format!("node IN (SELECT value FROM json_each(?{n}))"),
            (_, false) => format!("{} IS NULL", self.typed_param(n, "text")),
        }
    }

    /// A list of node names as [`Dialect::of_nodes`] reads it: comma-separated text on
    /// PostgreSQL (an array Citus can prune by), a JSON array on SQLite.
    pub fn node_list(self, nodes: &[String]) -> String {
        match self {
            Dialect::Postgres => nodes.join(","),
            Dialect::Sqlite => serde_json::to_string(nodes).unwrap_or_else(|_| "[]".into()),
        }
    }

    /// An integer column read as a 64-bit integer (`integer` is 32-bit on PostgreSQL).
    pub fn int64(self, col: &str) -> String {
        match self {
            Dialect::Postgres => format!("{col}::bigint"),
            Dialect::Sqlite => col.to_owned(),
        }
    }

    /// The `n`th bind parameter, a JSON text, as the dialect stores JSON; and a stored JSON
    /// column read back as text.
    pub fn json_param(self, n: usize) -> String {
        match self {
            Dialect::Postgres => format!("${n}::jsonb"),
            Dialect::Sqlite => format!("?{n}"),
        }
    }

    pub fn json_text(self, col: &str) -> String {
        match self {
            Dialect::Postgres => format!("{col}::text"),
            Dialect::Sqlite => col.to_owned(),
        }
    }

    /// A time column as epoch milliseconds: PostgreSQL keeps `timestamptz`, SQLite the
    /// milliseconds themselves.
    pub fn epoch_ms(self, col: &str) -> String {
        match self {
            Dialect::Postgres => format!("(extract(epoch from {col}) * 1000)::bigint"),
            Dialect::Sqlite => col.to_owned(),
        }
    }

    /// `sql` with its `?` placeholders as the dialect numbers them: `$1, $2, …` on
    /// PostgreSQL, unchanged on SQLite (whose `?` count up by themselves).
    pub fn numbered(self, sql: &str) -> String {
        if self == Dialect::Sqlite {
            return sql.to_owned();
        }
        let mut out = String::with_capacity(sql.len() + 8);
        let mut n = 0;
        for c in sql.chars() {
            if c == '?' {
                n += 1;
                out.push_str(&format!("${n}"));
            } else {
                out.push(c);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::Dialect;

    #[test]
    fn placeholders_are_numbered_for_postgres_and_kept_for_sqlite() {
        let sql = "a = ? AND b IN (?, ?)";
        assert_eq!(Dialect::Postgres.numbered(sql), "a = $1 AND b IN ($2, $3)");
        assert_eq!(Dialect::Sqlite.numbered(sql), sql);
    }
}
