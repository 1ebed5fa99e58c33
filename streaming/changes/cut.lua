-- Appends a cut (liveviews.changes.cuts): every log partition's head, read at the instant the
-- cut is appended, so that a source reading the log and the cuts in one transaction sees an
-- entry after the cut only with the cut. With it, where each of the cut's pipelines is at that
-- instant: a pipeline whose frontier is the cut already will write no batch that ends there.
-- KEYS[1] the cuts stream, KEYS[2] lv:{m}:frontier, KEYS[3] lv:{m}:frontier:batches,
-- KEYS[4] lv:{m}:active; KEYS[5..] the log's partitions, in order
-- ARGV[1] how many cuts the stream keeps; ARGV[2..] the pipelines the cut is for
-- Returns the cut's id, its fields, then per pipeline: the serving version's frontier name,
-- its frontier (JSON, or false) and its last batch (or false).
local pipelines = {}
for i = 2, #ARGV do pipelines[#pipelines + 1] = ARGV[i] end
local fields = {'pipelines', table.concat(pipelines, ',')}
for i = 5, #KEYS do
  local head = redis.call('XREVRANGE', KEYS[i], '+', '-', 'COUNT', 1)
  fields[#fields + 1] = tostring(i - 5)
  fields[#fields + 1] = head[1] and head[1][1] or '0-0'
end
local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', unpack(fields))
local at = {}
for _, pipeline in ipairs(pipelines) do
  local name = pipeline .. (redis.call('HGET', KEYS[4], pipeline) or '')
  at[#at + 1] = name
  at[#at + 1] = redis.call('HGET', KEYS[2], name)
  at[#at + 1] = redis.call('HGET', KEYS[3], name)
end
return {id, fields, at}
