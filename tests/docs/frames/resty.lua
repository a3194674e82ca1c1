-- Frame "resty" (tests/docs): an OpenResty fragment of the docs runs as the
-- content handler of a real nginx (GET /snippet must answer 200).
@BLOCK@
