-- Appends a batch's events of one log partition, once per idempotency key.
-- KEYS[1] the partition's stream (lv:log:N), KEYS[2] its record of the batch
-- ({lv:log:N}:appended:<idempotency key>; absent: keep none), KEYS[3..] (single server only) the
-- records of the batch's other partitions, checked first so that a refused batch writes
-- nothing anywhere.
-- ARGV[1] the batch's digest, ARGV[2] how long the record is kept (seconds), ARGV[3] the trim
-- ('', 'MAXLEN' or 'MINAGE'), ARGV[4] its threshold (entries, or milliseconds); then per event:
-- the number of fields n, and n field, value pairs.
-- MINAGE trims entries older than that many milliseconds by the store's own clock, the clock of
-- the entry ids: a client whose clock jumped ahead must not trim events the log should keep.
-- Returns the entry ids of the partition's events, in order: those stored in the record when the
-- batch was appended before (nothing is written twice), else those of the entries just added.
-- A record of another batch under the same key is refused with an IDEMPOTENCY_KEY_REUSED error.
local digest = ARGV[1]

local function stored(record)
  local value = redis.call('GET', record)
  if not value then
    return nil
  end
  local at = string.find(value, '\n', 1, true)
  if string.sub(value, 1, at - 1) ~= digest then
    return redis.error_reply('IDEMPOTENCY_KEY_REUSED this idempotency key was used for another batch')
  end
  local ids = {}
  for id in string.gmatch(string.sub(value, at + 1), '[^,]+') do
    ids[#ids + 1] = id
  end
  return ids
end

for i = 3, #KEYS do
  local other = stored(KEYS[i])
  if other and other.err then
    return other
  end
end
local before = KEYS[2] and stored(KEYS[2])
if before then
  return before
end

local trim, threshold = ARGV[3], ARGV[4]
if trim == 'MINAGE' then
  local now = redis.call('TIME')
  local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
  trim, threshold = 'MINID', tostring(math.max(0, now_ms - tonumber(ARGV[4])))
end

local ids = {}
local i = 5
while i <= #ARGV do
  local n = tonumber(ARGV[i])
  local command = {'XADD', KEYS[1]}
  if trim ~= '' then
    command[#command + 1] = trim
    command[#command + 1] = '~'
    command[#command + 1] = threshold
  end
  command[#command + 1] = '*'
  for j = i + 1, i + 2 * n do
    command[#command + 1] = ARGV[j]
  end
  ids[#ids + 1] = redis.call(unpack(command))
  i = i + 2 * n + 1
end
if KEYS[2] then
  redis.call('SET', KEYS[2], digest .. '\n' .. table.concat(ids, ','), 'EX', ARGV[2])
end
return ids
