-- Two more job states, for sessions with a search (`[search]` in the spec): `held`, a candidate
-- its shape's search has not chosen yet, and `skipped`, one the search ended without choosing.
-- Mirrors schemas/sqlite/0005. MariaDB keeps a column's CHECK with the column, so redefining the
-- column replaces it (MySQL 8 would keep the old one as the named constraint `job_chk_1`, to be
-- dropped first). The table is rebuilt: on a large job table this takes a while, once.
ALTER TABLE job MODIFY state VARCHAR(16) NOT NULL CHECK (state IN ('new', 'compile_queued',
    'compiling', 'compiled', 'eval_queued', 'evaluating', 'evaluated', 'errored', 'not_applicable',
    'held', 'skipped'));
