-- The reference (`cf_`) of each custom field a checkout config defines,
-- one per (config, key): a key keeps its reference in every version of its
-- config, also when a version drops it and a later one brings it back.
-- Data profile grants name fields by these references; shaping resolves
-- them here to the (config_ref, key) a checkout session's custom_fields
-- are keyed by. Rows are written with the version that defines the key
-- and never change. Configs written before this migration get theirs
-- from `Store::migrate` (`checkout_configs::assign_missing_refs`).
CREATE TABLE checkout_custom_fields (
    custom_field_ref TEXT PRIMARY KEY,
    environment_ref  TEXT NOT NULL,
    config_ref       TEXT NOT NULL,
    key              TEXT NOT NULL,
    created_at       BIGINT NOT NULL,
    UNIQUE (config_ref, key)
);
