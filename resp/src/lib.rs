//! RESP2 and RESP3: the values, a streaming decoder and an encoder.
