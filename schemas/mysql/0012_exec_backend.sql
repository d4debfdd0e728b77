-- Shoal MySQL/MariaDB schema, version 12: the command backend is named exec.
--
-- Why: "command" named two things, operators' commands (the `command` table, the `<ns>.commands`
-- queue) and the backend that builds and runs a tuning spec by execing its `[build] command` and
-- `[run] command`. That backend is now `exec` (`shoal_model::Backend`), its steps `exec_build`
-- and `exec_run` (`shoal_model::Step`), and a build reads no other name, so the rows written
-- under the old ones are renamed:
-- - sessions of the backend `command` are of `exec`;
-- - jobs that name the steps `command_build` and `command_run` name `exec_build` and `exec_run`.
--   Labels are never changed (`mysql::labels`): the new names are labels of their own, made
--   here, and the old ones stay, named by no job.
--
-- Not done by SQL alone: a job's identity hash covers its step names (0010_lean_job.sql), and
-- its candidate key, the hash's last input, is no longer stored, so `mysql::migrate_exec`
-- renames the jobs' steps and computes their hashes again, from their parameters, in batches.
-- Every statement here, and each job's UPDATE there, changes only rows still named the old way:
-- a migration cut off half-way is finished by the next `migrate`.

INSERT INTO label (text) VALUES ('exec_build'), ('exec_run') ON DUPLICATE KEY UPDATE id = id;

UPDATE session SET backend = 'exec' WHERE backend = 'command';
