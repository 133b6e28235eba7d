-- The catalogue (contract 10 and 10.1): products, prices, the one offer of
-- each product, promotions with the offers they cover, and checkout configs
-- with their immutable versions. Money is a currency code and a count of
-- minor units. Every row has a version, bumped by each write (its ETag).
CREATE TABLE products (
    product_ref     TEXT PRIMARY KEY,
    environment_ref TEXT NOT NULL,
    name            TEXT NOT NULL,
    description     TEXT,
    status          TEXT NOT NULL,
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL,
    published_at    BIGINT,
    version         BIGINT NOT NULL DEFAULT 1
);
CREATE INDEX products_by_environment ON products (environment_ref, created_at, product_ref);

CREATE TABLE prices (
    price_ref       TEXT PRIMARY KEY,
    environment_ref TEXT NOT NULL,
    product_ref     TEXT NOT NULL REFERENCES products (product_ref),
    currency        TEXT NOT NULL,
    amount_minor    BIGINT NOT NULL,
    price_type      TEXT NOT NULL,
    billing_interval TEXT,
    status          TEXT NOT NULL,
    reprice_reason  TEXT,
    created_at      BIGINT NOT NULL,
    published_at    BIGINT,
    superseded_at   BIGINT,
    version         BIGINT NOT NULL DEFAULT 1
);
CREATE INDEX prices_by_environment ON prices (environment_ref, created_at, price_ref);
CREATE INDEX prices_by_product ON prices (product_ref, created_at, price_ref);
-- A product has at most one published price: the offer's.
CREATE UNIQUE INDEX prices_one_published ON prices (product_ref) WHERE status = 'published';

CREATE TABLE offers (
    offer_ref       TEXT PRIMARY KEY,
    environment_ref TEXT NOT NULL,
    product_ref     TEXT NOT NULL UNIQUE REFERENCES products (product_ref),
    price_ref       TEXT NOT NULL REFERENCES prices (price_ref),
    status          TEXT NOT NULL,
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL,
    version         BIGINT NOT NULL DEFAULT 1
);
CREATE INDEX offers_by_environment ON offers (environment_ref, created_at, offer_ref);

CREATE TABLE promotions (
    promotion_ref   TEXT PRIMARY KEY,
    environment_ref TEXT NOT NULL,
    offer_refs      TEXT NOT NULL,
    percent_off     BIGINT,
    amount_off_currency TEXT,
    amount_off_minor BIGINT,
    starts_at       BIGINT NOT NULL,
    ends_at         BIGINT,
    created_at      BIGINT NOT NULL,
    version         BIGINT NOT NULL DEFAULT 1
);
-- One row per offer a promotion covers, for the overlap rule and for an
-- offer's promotional amount.
CREATE TABLE promotion_offers (
    offer_ref       TEXT NOT NULL REFERENCES offers (offer_ref),
    promotion_ref   TEXT NOT NULL REFERENCES promotions (promotion_ref),
    starts_at       BIGINT NOT NULL,
    ends_at         BIGINT,
    PRIMARY KEY (offer_ref, promotion_ref)
);

CREATE TABLE checkout_configs (
    config_ref        TEXT PRIMARY KEY,
    environment_ref   TEXT NOT NULL,
    status            TEXT NOT NULL,
    current_version   BIGINT NOT NULL,
    published_version BIGINT,
    created_at        BIGINT NOT NULL,
    updated_at        BIGINT NOT NULL,
    version           BIGINT NOT NULL DEFAULT 1
);
-- The fields of a version as JSON (name, line items, urls, custom fields,
-- mode), written once.
CREATE TABLE checkout_config_versions (
    config_ref  TEXT NOT NULL REFERENCES checkout_configs (config_ref),
    version     BIGINT NOT NULL,
    body        TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    PRIMARY KEY (config_ref, version)
);
