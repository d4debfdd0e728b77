-- Shoal SQLite schema, version 12: the command backend is named exec.
--
-- Why: "command" named two things, operators' commands (the `command` table, the `<ns>.commands`
-- queue) and the backend that builds and runs a tuning spec by execing its `[build] command` and
-- `[run] command`. That backend is now `exec` (`shoal_model::Backend`), its steps `exec_build`
-- and `exec_run` (`shoal_model::Step`), and a build reads no other name, so the rows written
-- under the old ones are renamed. A job's identity is its columns here (the unique key of
-- `job`), steps included, so renaming the steps renames the identity alike: loading the same
-- spec again finds its jobs.

UPDATE session SET backend = 'exec' WHERE backend = 'command';

UPDATE job SET compile_step = 'exec_build' WHERE compile_step = 'command_build';

UPDATE job SET eval_step = 'exec_run' WHERE eval_step = 'command_run';
