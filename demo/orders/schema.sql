-- The shop's one table. Running this file twice changes nothing:
--   psql "$DATABASE_URL" -f demo/orders/schema.sql
-- Its checks are the declaration's (demo/orders/app.py): a row the views could not hold is
-- refused by the database, not found later by change data capture.
CREATE TABLE IF NOT EXISTS orders (
    id         serial PRIMARY KEY,
    customer   text NOT NULL CHECK (length(customer) BETWEEN 1 AND 64),
    status     text NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'paid', 'shipped')),
    total      numeric(10, 2) NOT NULL CHECK (total >= 0),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- updated_at follows every change, whoever writes it (the demo's writer or psql).
CREATE OR REPLACE FUNCTION orders_touch() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.updated_at := now();
    RETURN NEW;
END $$;
CREATE OR REPLACE TRIGGER orders_touch BEFORE UPDATE ON orders
    FOR EACH ROW EXECUTE FUNCTION orders_touch();
