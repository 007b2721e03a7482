-- agentmem schema, migration 011: the group a tool belongs to (toolbox.Toolbox.register_schema).
--
-- A catalogue of hundreds of tools comes in groups: the MCP server a tool is listed by,
-- the API or toolkit it is one endpoint of. The group's name is indexed with the tool
-- (a request naming the service finds its tools) and the group as a whole is a
-- retrieval signal (toolbox/index.py). Empty for a tool registered without one.
-- (psycopg sql.SQL template: no literal braces in this file.)

ALTER TABLE toolbox_memory ADD COLUMN category text NOT NULL DEFAULT '';
