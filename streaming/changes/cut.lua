-- Appends a cut (liveviews.changes.cuts): every log partition's head, read at the instant the
-- cut is appended, so that a source reading the log and the cuts in one transaction sees an
-- entry after the cut only with the cut.
-- KEYS[1] the cuts stream; KEYS[2..] the log's partitions, in order
-- ARGV[1] how many cuts the stream keeps; ARGV[2] the pipelines the cut is for, comma-separated
-- Returns the cut's id, then its fields.
local fields = {'pipelines', ARGV[2]}
for i = 2, #KEYS do
  local head = redis.call('XREVRANGE', KEYS[i], '+', '-', 'COUNT', 1)
  fields[#fields + 1] = tostring(i - 2)
  fields[#fields + 1] = head[1] and head[1][1] or '0-0'
end
local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', unpack(fields))
return {id, fields}
