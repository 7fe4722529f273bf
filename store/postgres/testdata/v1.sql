--
-- PostgreSQL database dump
--


-- Dumped from database version 15.20 (Debian 15.20-0+deb12u1)
-- Dumped by pg_dump version 15.20 (Debian 15.20-0+deb12u1)

SET statement_timeout = 0;
SET lock_timeout = 0;
SET idle_in_transaction_session_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;
SELECT pg_catalog.set_config('search_path', '', false);
SET check_function_bodies = false;
SET xmloption = content;
SET client_min_messages = warning;
SET row_security = off;

--
-- Name: ctxmgr_v1_fixture; Type: SCHEMA; Schema: -; Owner: -
--

CREATE SCHEMA ctxmgr_v1_fixture;


SET default_tablespace = '';

SET default_table_access_method = heap;

--
-- Name: archive; Type: TABLE; Schema: ctxmgr_v1_fixture; Owner: -
--

CREATE TABLE ctxmgr_v1_fixture.archive (
    session text NOT NULL COLLATE pg_catalog."C",
    pos bigint NOT NULL,
    body bytea NOT NULL,
    archived_at timestamp with time zone NOT NULL
);


--
-- Name: events; Type: TABLE; Schema: ctxmgr_v1_fixture; Owner: -
--

CREATE TABLE ctxmgr_v1_fixture.events (
    id bigint NOT NULL,
    session text NOT NULL COLLATE pg_catalog."C",
    at timestamp with time zone NOT NULL,
    kind text NOT NULL,
    body bytea NOT NULL
);


--
-- Name: events_id_seq; Type: SEQUENCE; Schema: ctxmgr_v1_fixture; Owner: -
--

CREATE SEQUENCE ctxmgr_v1_fixture.events_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;


--
-- Name: events_id_seq; Type: SEQUENCE OWNED BY; Schema: ctxmgr_v1_fixture; Owner: -
--

ALTER SEQUENCE ctxmgr_v1_fixture.events_id_seq OWNED BY ctxmgr_v1_fixture.events.id;


--
-- Name: messages; Type: TABLE; Schema: ctxmgr_v1_fixture; Owner: -
--

CREATE TABLE ctxmgr_v1_fixture.messages (
    session text NOT NULL COLLATE pg_catalog."C",
    pos bigint NOT NULL,
    hash bytea NOT NULL,
    body bytea NOT NULL
);


--
-- Name: offloads; Type: TABLE; Schema: ctxmgr_v1_fixture; Owner: -
--

CREATE TABLE ctxmgr_v1_fixture.offloads (
    session text NOT NULL COLLATE pg_catalog."C",
    key text NOT NULL COLLATE pg_catalog."C",
    text bytea NOT NULL,
    bytes bigint NOT NULL,
    lines bigint NOT NULL,
    expires text COLLATE pg_catalog."C",
    created timestamp with time zone NOT NULL
);


--
-- Name: schema_migrations; Type: TABLE; Schema: ctxmgr_v1_fixture; Owner: -
--

CREATE TABLE ctxmgr_v1_fixture.schema_migrations (
    version integer NOT NULL,
    applied timestamp with time zone NOT NULL
);


--
-- Name: sessions; Type: TABLE; Schema: ctxmgr_v1_fixture; Owner: -
--

CREATE TABLE ctxmgr_v1_fixture.sessions (
    id text NOT NULL COLLATE pg_catalog."C",
    created timestamp with time zone NOT NULL,
    updated timestamp with time zone NOT NULL,
    model text DEFAULT ''::text NOT NULL,
    config text,
    state bytea
);


--
-- Name: summaries; Type: TABLE; Schema: ctxmgr_v1_fixture; Owner: -
--

CREATE TABLE ctxmgr_v1_fixture.summaries (
    session text NOT NULL COLLATE pg_catalog."C",
    version integer NOT NULL,
    text bytea NOT NULL,
    from_pos bigint NOT NULL,
    to_pos bigint NOT NULL,
    created text NOT NULL,
    summarizer text DEFAULT ''::text NOT NULL
);


--
-- Name: events id; Type: DEFAULT; Schema: ctxmgr_v1_fixture; Owner: -
--

ALTER TABLE ONLY ctxmgr_v1_fixture.events ALTER COLUMN id SET DEFAULT nextval('ctxmgr_v1_fixture.events_id_seq'::regclass);


--
-- Data for Name: archive; Type: TABLE DATA; Schema: ctxmgr_v1_fixture; Owner: -
--

INSERT INTO ctxmgr_v1_fixture.archive VALUES ('s1', 0, '\x7b22726f6c65223a2273797374656d222c22636f6e74656e74223a5b7b2274797065223a2274657874222c2274657874223a22596f75206172652074657273652e227d5d7d', '2025-01-02 03:04:05.123456+00');
INSERT INTO ctxmgr_v1_fixture.archive VALUES ('s1', 1, '\x7b22726f6c65223a2275736572222c226e616d65223a22616c696365222c22636f6e74656e74223a5b7b2274797065223a2274657874222c2274657874223a2268c3a96c6c6f2077c3b6726c6420e2809420e4bda0e5a5bd20f09f8c8df09f91a9e2808df09f92bb205c75323032387365705c7532303239205c2271756f7465735c22205c753030336368746d6c5c7530303365205c7530303236205c5c206261636b5c6e736c6173685c74746162205c75303030306e756c207f227d5d2c226d657461223a7b227475726e223a2231222c22c3bc6ec3af223a22c3a7c3b864c3a920f09f8e89227d7d', '2025-01-02 03:04:05.123456+00');
INSERT INTO ctxmgr_v1_fixture.archive VALUES ('s1', 2, '\x7b22726f6c65223a2275736572222c22636f6e74656e74223a5b7b2274797065223a2274657874222c2274657874223a226c6f6f6b206174207468657365227d2c7b2274797065223a22696d616765222c22696d616765223a7b226d656469615f74797065223a22696d6167652f706e67222c2264617461223a226956424f5277304b47676f414141414e535568455569426d5957746c49476c745957646c49474a356447567a49502f2b222c227769647468223a3634302c22686569676874223a3438307d7d2c7b2274797065223a22696d616765222c22696d616765223a7b2275726c223a2268747470733a2f2f6578616d706c652e636f6d2f612e706e673f783d315c7530303236793d5c7530303363325c7530303365222c2264657461696c223a2268696768227d7d2c7b2274797065223a2266696c65222c2266696c65223a7b226964223a2266696c652d31222c226e616d65223a22612e706466222c226d656469615f74797065223a226170706c69636174696f6e2f706466222c2264617461223a224a564245526930784c6a514b227d7d5d2c2277697265223a22616e7468726f706963222c227368617065223a327d', '2025-01-02 03:04:05.123456+00');


--
-- Data for Name: events; Type: TABLE DATA; Schema: ctxmgr_v1_fixture; Owner: -
--

INSERT INTO ctxmgr_v1_fixture.events VALUES (1, 's1', '2025-01-02 03:04:05.123456+00', 'append', '\x7b226b696e64223a22617070656e64227d');
INSERT INTO ctxmgr_v1_fixture.events VALUES (2, 's1', '2025-01-02 03:04:05.123456+00', 'prepare', '\x7b226b696e64223a2270726570617265227d');


--
-- Data for Name: messages; Type: TABLE DATA; Schema: ctxmgr_v1_fixture; Owner: -
--

INSERT INTO ctxmgr_v1_fixture.messages VALUES ('s1', 0, '\x93441a5b2a1254446ee4aff645ed0cf258f9826a0c8c9e87610060ab7846f603', '\x7b22726f6c65223a2273797374656d222c22636f6e74656e74223a5b7b2274797065223a2274657874222c2274657874223a22596f75206172652074657273652e227d5d7d');
INSERT INTO ctxmgr_v1_fixture.messages VALUES ('s1', 1, '\xa5d9e9abb9ff8aa8fecd08a73eab871f4b1c7e0aaa7a503c1fb58bbe19d60dba', '\x7b22726f6c65223a2275736572222c226e616d65223a22616c696365222c22636f6e74656e74223a5b7b2274797065223a2274657874222c2274657874223a2268c3a96c6c6f2077c3b6726c6420e2809420e4bda0e5a5bd20f09f8c8df09f91a9e2808df09f92bb205c75323032387365705c7532303239205c2271756f7465735c22205c753030336368746d6c5c7530303365205c7530303236205c5c206261636b5c6e736c6173685c74746162205c75303030306e756c207f227d5d2c226d657461223a7b227475726e223a2231222c22c3bc6ec3af223a22c3a7c3b864c3a920f09f8e89227d7d');
INSERT INTO ctxmgr_v1_fixture.messages VALUES ('s1', 2, '\x8788aaa6a6028a9c8c04f65c5e072d84999bf40cd94d9f484f2fadc5adc6ef0d', '\x7b22726f6c65223a2275736572222c22636f6e74656e74223a5b7b2274797065223a2274657874222c2274657874223a226c6f6f6b206174207468657365227d2c7b2274797065223a22696d616765222c22696d616765223a7b226d656469615f74797065223a22696d6167652f706e67222c2264617461223a226956424f5277304b47676f414141414e535568455569426d5957746c49476c745957646c49474a356447567a49502f2b222c227769647468223a3634302c22686569676874223a3438307d7d2c7b2274797065223a22696d616765222c22696d616765223a7b2275726c223a2268747470733a2f2f6578616d706c652e636f6d2f612e706e673f783d315c7530303236793d5c7530303363325c7530303365222c2264657461696c223a2268696768227d7d2c7b2274797065223a2266696c65222c2266696c65223a7b226964223a2266696c652d31222c226e616d65223a22612e706466222c226d656469615f74797065223a226170706c69636174696f6e2f706466222c2264617461223a224a564245526930784c6a514b227d7d5d2c2277697265223a22616e7468726f706963222c227368617065223a327d');
INSERT INTO ctxmgr_v1_fixture.messages VALUES ('s1', 3, '\x7d757ac6d71f206e257c58322d0110a46b8a28d1ee79d63a05e81a9da1b8b104', '\x7b22726f6c65223a22617373697374616e74222c22636f6e74656e74223a5b7b2274797065223a22726561736f6e696e67222c2274657874223a224c6574206d65207468696e6be280a65c6e737465702031222c227369676e6174757265223a2245715142436b594941526743496b442b2f3d3d227d2c7b2274797065223a22726561736f6e696e67222c227265646163746564223a226f70617175652d72656461637465642d646174613d3d227d2c7b2274797065223a2274657874222c2274657874223a2252756e6e696e6720746f6f6c732e227d5d2c22746f6f6c5f63616c6c73223a5b7b226964223a2263616c6c5f31222c226e616d65223a2262617368222c22617267756d656e7473223a227b5c22636d645c223a205c226c73202d6c61205c5c5c222f746d705c5c5c22207c206772657020275c7530303363785c7530303365275c222c205c226e5c223a203165337d227d2c7b226964223a2263616c6c5f32222c226e616d65223a2265646974222c22617267756d656e7473223a227b5c2262726f6b656e5c223a205b312c2032222c226578747261223a7b22696e646578223a307d7d2c7b226964223a2263616c6c5f33222c226e616d65223a226e6f61726773222c22617267756d656e7473223a22227d2c7b226964223a2263616c6c5f34222c226e616d65223a22737061636573222c22617267756d656e7473223a2220207b5c6e20205c22615c22203a2031207d5c6e227d5d2c2277697265223a22616e7468726f706963227d');
INSERT INTO ctxmgr_v1_fixture.messages VALUES ('s1', 4, '\x7d69f4a66ba171292c82509acc53fea5902fa9965ca26f99a492d42b3849f854', '\x7b22726f6c65223a22746f6f6c222c226e616d65223a2262617368222c22636f6e74656e74223a5b7b2274797065223a2274657874222c2274657874223a22746f74616c20305c6e2d72772d722d2d722d2d203120726f6f7420726f6f74203020615c6e227d5d2c22746f6f6c5f63616c6c5f6964223a2263616c6c5f31227d');
INSERT INTO ctxmgr_v1_fixture.messages VALUES ('s1', 5, '\x665425a2900f95464e3e2ecb9bf9defcecdfef99431876951ff1c8289a77cad4', '\x7b22726f6c65223a22746f6f6c222c226e616d65223a2265646974222c22636f6e74656e74223a5b7b2274797065223a2274657874222c2274657874223a226572726f723a20696e76616c6964204a534f4e20696e20617267756d656e7473227d5d2c22746f6f6c5f63616c6c5f6964223a2263616c6c5f32222c2269735f6572726f72223a747275652c226a6f696e5f70726576223a747275657d');
INSERT INTO ctxmgr_v1_fixture.messages VALUES ('s1', 6, '\x1f5e51fd5b39e7327cfe6c1365518ca40bf6df080ee9a4999528913313461839', '\x7b22726f6c65223a22746f6f6c222c226e616d65223a22737061636573222c22636f6e74656e74223a5b7b2274797065223a2274657874227d5d2c22746f6f6c5f63616c6c5f6964223a2263616c6c5f34227d');
INSERT INTO ctxmgr_v1_fixture.messages VALUES ('s1', 7, '\x5ebc35dc9d5b548f83809be3f6e59bf5552ba60411ff13e3f59908bb6ec75799', '\x7b22726f6c65223a22617373697374616e74222c22636f6e74656e74223a5b7b2274797065223a226f74686572222c22726177223a7b2274797065223a227365727665725f746f6f6c5f757365222c226964223a227372765f31222c22696e707574223a7b2271223a2278205c7530303363795c7530303365227d7d7d2c7b2274797065223a2274657874222c2274657874223a22646f6e65222c226578747261223a7b2263616368655f636f6e74726f6c223a7b2274797065223a22657068656d6572616c227d2c226369746174696f6e73223a5b7b2261223a312c2262223a225c7530306539227d5d7d7d5d2c2277697265223a226f70656e6169222c227368617065223a312c226578747261223a7b22617564696f223a7b226964223a226131227d2c227265667573616c223a6e756c6c7d7d');
INSERT INTO ctxmgr_v1_fixture.messages VALUES ('s1', 8, '\x9a4e957b3c05213dd449abe20543128385f9db1e86b4dc0aaabfc3cd12e4ef92', '\x7b22726f6c65223a2273797374656d222c22636f6e74656e74223a5b7b2274797065223a2274657874222c2274657874223a22646576227d5d2c2277697265223a226f70656e6169222c22776972655f726f6c65223a22646576656c6f706572227d');
INSERT INTO ctxmgr_v1_fixture.messages VALUES ('s1', 9, '\xf49decb7ceffc3df4c9616b082aef4f7cb7148431c5affe2e4c4797473e683b4', '\x7b22726f6c65223a2275736572222c227368617065223a337d');
INSERT INTO ctxmgr_v1_fixture.messages VALUES ('s1', 10, '\x20e0ec9a0530e5f6848add7b9d5cde58cad2512769b4436f7b6d3e43be94bc1f', '\x7b22726f6c65223a22617373697374616e74222c227368617065223a347d');
INSERT INTO ctxmgr_v1_fixture.messages VALUES ('s2', 0, '\xc07c6d2a280a6642a3cf5c1e13ec76c1c51e9242e18f20f8d57ca465bee6884c', '\x7b22726f6c65223a2275736572222c22636f6e74656e74223a5b7b2274797065223a2274657874222c2274657874223a226f6e6c79227d5d7d');


--
-- Data for Name: offloads; Type: TABLE DATA; Schema: ctxmgr_v1_fixture; Owner: -
--

INSERT INTO ctxmgr_v1_fixture.offloads VALUES ('s1', 'call_1', '\x6f6e650a74776f0a', 8, 2, NULL, '2025-01-02 03:04:05.123456+00');
INSERT INTO ctxmgr_v1_fixture.offloads VALUES ('s1', 'call_2', '\x6b6570740a', 5, 1, '2025-01-03T03:04:05.123456789Z', '2025-01-02 03:04:05.123456+00');
INSERT INTO ctxmgr_v1_fixture.offloads VALUES ('s1', 'call_3', '\x676f6e650a', 5, 1, '2025-01-02T02:04:05.123456789Z', '2025-01-02 03:04:05.123456+00');


--
-- Data for Name: schema_migrations; Type: TABLE DATA; Schema: ctxmgr_v1_fixture; Owner: -
--

INSERT INTO ctxmgr_v1_fixture.schema_migrations VALUES (1, '2025-01-02 03:04:05.123456+00');


--
-- Data for Name: sessions; Type: TABLE DATA; Schema: ctxmgr_v1_fixture; Owner: -
--

INSERT INTO ctxmgr_v1_fixture.sessions VALUES ('s2', '2025-01-02 03:04:05.123456+00', '2025-01-02 03:04:05.123456+00', '', NULL, NULL);
INSERT INTO ctxmgr_v1_fixture.sessions VALUES ('s1', '2025-01-02 03:04:05.123456+00', '2025-01-02 03:04:05.123456+00', 'gpt-4o', '{"window":128000}', '\x7b227374617465223a317d');


--
-- Data for Name: summaries; Type: TABLE DATA; Schema: ctxmgr_v1_fixture; Owner: -
--

INSERT INTO ctxmgr_v1_fixture.summaries VALUES ('s1', 1, '\x73756d6d617279203100', 0, 1, '2025-01-02T05:04:05.123456789+01:00', 'extractive');
INSERT INTO ctxmgr_v1_fixture.summaries VALUES ('s1', 2, '\x73756d6d617279203200', 0, 2, '2025-01-02T06:04:05.123456789+01:00', 'extractive');


--
-- Name: events_id_seq; Type: SEQUENCE SET; Schema: ctxmgr_v1_fixture; Owner: -
--

SELECT pg_catalog.setval('ctxmgr_v1_fixture.events_id_seq', 2, true);


--
-- Name: archive archive_pkey; Type: CONSTRAINT; Schema: ctxmgr_v1_fixture; Owner: -
--

ALTER TABLE ONLY ctxmgr_v1_fixture.archive
    ADD CONSTRAINT archive_pkey PRIMARY KEY (session, pos);


--
-- Name: events events_pkey; Type: CONSTRAINT; Schema: ctxmgr_v1_fixture; Owner: -
--

ALTER TABLE ONLY ctxmgr_v1_fixture.events
    ADD CONSTRAINT events_pkey PRIMARY KEY (id);


--
-- Name: messages messages_pkey; Type: CONSTRAINT; Schema: ctxmgr_v1_fixture; Owner: -
--

ALTER TABLE ONLY ctxmgr_v1_fixture.messages
    ADD CONSTRAINT messages_pkey PRIMARY KEY (session, pos);


--
-- Name: offloads offloads_pkey; Type: CONSTRAINT; Schema: ctxmgr_v1_fixture; Owner: -
--

ALTER TABLE ONLY ctxmgr_v1_fixture.offloads
    ADD CONSTRAINT offloads_pkey PRIMARY KEY (session, key);


--
-- Name: schema_migrations schema_migrations_pkey; Type: CONSTRAINT; Schema: ctxmgr_v1_fixture; Owner: -
--

ALTER TABLE ONLY ctxmgr_v1_fixture.schema_migrations
    ADD CONSTRAINT schema_migrations_pkey PRIMARY KEY (version);


--
-- Name: sessions sessions_pkey; Type: CONSTRAINT; Schema: ctxmgr_v1_fixture; Owner: -
--

ALTER TABLE ONLY ctxmgr_v1_fixture.sessions
    ADD CONSTRAINT sessions_pkey PRIMARY KEY (id);


--
-- Name: summaries summaries_pkey; Type: CONSTRAINT; Schema: ctxmgr_v1_fixture; Owner: -
--

ALTER TABLE ONLY ctxmgr_v1_fixture.summaries
    ADD CONSTRAINT summaries_pkey PRIMARY KEY (session, version);


--
-- Name: events_session; Type: INDEX; Schema: ctxmgr_v1_fixture; Owner: -
--

CREATE INDEX events_session ON ctxmgr_v1_fixture.events USING btree (session, id);


--
-- Name: offloads_expires; Type: INDEX; Schema: ctxmgr_v1_fixture; Owner: -
--

CREATE INDEX offloads_expires ON ctxmgr_v1_fixture.offloads USING btree (expires) WHERE (expires IS NOT NULL);


--
-- Name: sessions_updated; Type: INDEX; Schema: ctxmgr_v1_fixture; Owner: -
--

CREATE INDEX sessions_updated ON ctxmgr_v1_fixture.sessions USING btree (updated);


--
-- Name: archive archive_session_fkey; Type: FK CONSTRAINT; Schema: ctxmgr_v1_fixture; Owner: -
--

ALTER TABLE ONLY ctxmgr_v1_fixture.archive
    ADD CONSTRAINT archive_session_fkey FOREIGN KEY (session) REFERENCES ctxmgr_v1_fixture.sessions(id) ON DELETE CASCADE;


--
-- Name: events events_session_fkey; Type: FK CONSTRAINT; Schema: ctxmgr_v1_fixture; Owner: -
--

ALTER TABLE ONLY ctxmgr_v1_fixture.events
    ADD CONSTRAINT events_session_fkey FOREIGN KEY (session) REFERENCES ctxmgr_v1_fixture.sessions(id) ON DELETE CASCADE;


--
-- Name: messages messages_session_fkey; Type: FK CONSTRAINT; Schema: ctxmgr_v1_fixture; Owner: -
--

ALTER TABLE ONLY ctxmgr_v1_fixture.messages
    ADD CONSTRAINT messages_session_fkey FOREIGN KEY (session) REFERENCES ctxmgr_v1_fixture.sessions(id) ON DELETE CASCADE;


--
-- Name: offloads offloads_session_fkey; Type: FK CONSTRAINT; Schema: ctxmgr_v1_fixture; Owner: -
--

ALTER TABLE ONLY ctxmgr_v1_fixture.offloads
    ADD CONSTRAINT offloads_session_fkey FOREIGN KEY (session) REFERENCES ctxmgr_v1_fixture.sessions(id) ON DELETE CASCADE;


--
-- Name: summaries summaries_session_fkey; Type: FK CONSTRAINT; Schema: ctxmgr_v1_fixture; Owner: -
--

ALTER TABLE ONLY ctxmgr_v1_fixture.summaries
    ADD CONSTRAINT summaries_session_fkey FOREIGN KEY (session) REFERENCES ctxmgr_v1_fixture.sessions(id) ON DELETE CASCADE;


--
-- PostgreSQL database dump complete
--


