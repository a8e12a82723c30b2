-- Sample database for docker-compose.yml. The postgres image runs this once, as the superuser, in
-- the database named by POSTGRES_DB, when its data volume is empty (`docker compose down -v` resets).
--
-- It also shows the least privileges pgbridge needs (docs/deployment.md, "Postgres privileges"):
--   * a role WITH LOGIN REPLICATION (replication connections, creating the logical slot);
--   * USAGE on the schema and SELECT on every published table (initial snapshot, catalog checks);
--   * the publication created here by its owner, so pgbridge needs no CREATE right on the database.

-- Demo password only: real deployments keep the DSN in a secret (see docs/deployment.md).
CREATE ROLE pgbridge WITH LOGIN REPLICATION PASSWORD 'pgbridge';

CREATE SCHEMA shop;

CREATE TABLE shop.customers (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    email       text        NOT NULL UNIQUE,
    full_name   text,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE shop.orders (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    customer_id  bigint        NOT NULL REFERENCES shop.customers (id),
    status       text          NOT NULL DEFAULT 'new',
    total        numeric(12,2) NOT NULL,
    items        jsonb         NOT NULL DEFAULT '[]',
    placed_at    timestamptz   NOT NULL DEFAULT now(),
    ship_date    date,
    reference    uuid          NOT NULL DEFAULT gen_random_uuid()
);

-- No primary key: REPLICA IDENTITY FULL lets Postgres publish its updates and deletes with the
-- whole old row (pgbridge then emits a null Kafka key for it).
CREATE TABLE shop.audit_log (
    happened_at  timestamptz NOT NULL DEFAULT now(),
    actor        text        NOT NULL,
    action       text        NOT NULL,
    detail       text
);
ALTER TABLE shop.audit_log REPLICA IDENTITY FULL;

GRANT USAGE ON SCHEMA shop TO pgbridge;
GRANT SELECT ON shop.customers, shop.orders, shop.audit_log TO pgbridge;

CREATE PUBLICATION pgbridge FOR TABLE shop.customers, shop.orders, shop.audit_log;

INSERT INTO shop.customers (email, full_name) VALUES
    ('ada@example.com', 'Ada Lovelace'),
    ('grace@example.com', 'Grace Hopper'),
    ('edsger@example.com', 'Edsger Dijkstra');

INSERT INTO shop.orders (customer_id, status, total, items, ship_date) VALUES
    (1, 'paid',    42.50, '[{"sku": "A-1", "qty": 2}]', current_date + 2),
    (2, 'new',     13.99, '[{"sku": "B-7", "qty": 1}]', NULL),
    (3, 'shipped', 99.00, '[{"sku": "C-3", "qty": 3}]', current_date);

INSERT INTO shop.audit_log (actor, action, detail) VALUES
    ('init.sql', 'seed', 'sample rows created');
