-- The store's identity (domain::StoreId): one row, made by the first
-- migrate and never changed. A fleet names its Redis keys and its RabbitMQ
-- queue after it by default, so that two stores on one Redis or one
-- virtual host never take each other's work.
CREATE TABLE store_identity (
    singleton  BIGINT PRIMARY KEY CHECK (singleton = 1),
    store_id   TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
