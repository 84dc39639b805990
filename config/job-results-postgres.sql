-- The table config/job-results-postgres.json's `results_to_postgres` sink writes: one row
-- per job, keyed by the job id, so a result can be fetched long after the results stream
-- dropped it (docs/job-queue.md, "Persisting results to PostgreSQL").
CREATE TABLE job_results (
    job_id       text PRIMARY KEY,
    status       text NOT NULL,
    error        text,
    output       text,
    job_stream   text NOT NULL,
    job_sequence bigint NOT NULL,
    delivered    integer NOT NULL,
    finished_at  timestamptz NOT NULL,
    result       jsonb NOT NULL,
    stored_at    timestamptz NOT NULL DEFAULT now()
);
