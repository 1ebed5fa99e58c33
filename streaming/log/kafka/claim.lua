-- Claims the record of a batch appended to a Kafka log under an idempotency key
-- (liveviews.log.kafka.appended), in one round trip and on the store's clock.
-- KEYS[1] the batch's record (lv:kafka:appended:<key>); ARGV[1] the batch's digest, ARGV[2] how
-- long the record is kept (seconds); ARGV[3], when given, a record of a writer that is gone, to
-- take over if it is still the one there.
-- Sets the record to '<digest>\npending\n<store ms>' if there is none (or it is ARGV[3]).
-- Returns the store's time in milliseconds, then the record found if the claim failed.
local t = redis.call('TIME')
local now = string.format('%.0f', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
local mine = ARGV[1] .. '\npending\n' .. now
local found = redis.call('GET', KEYS[1])
if not found or found == ARGV[3] then
  redis.call('SET', KEYS[1], mine, 'EX', ARGV[2])
  return {now}
end
return {now, found}
