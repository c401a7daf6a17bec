//! Prometheus remote write 1.0 bodies: a snappy-compressed (block format) protobuf
//! `WriteRequest`, decoded within a size limit.

use prost::Message;

/// The remote-write 1.0 protobuf messages gpulens reads (fields it does not read, such as
/// exemplars and metadata, are skipped by the decoder).
mod proto {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct WriteRequest {
        #[prost(message, repeated, tag = "1")]
        pub timeseries: Vec<TimeSeries>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TimeSeries {
        #[prost(message, repeated, tag = "1")]
        pub labels: Vec<Label>,
        #[prost(message, repeated, tag = "2")]
        pub samples: Vec<Sample>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Label {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(string, tag = "2")]
        pub value: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Sample {
        #[prost(double, tag = "1")]
        pub value: f64,
        #[prost(int64, tag = "2")]
        pub timestamp: i64,
    }
}

pub use proto::{Label, Sample, TimeSeries, WriteRequest};

/// Decodes a remote-write body: snappy block format (its stated length checked against
/// `max_decoded` before anything is allocated), then protobuf.
pub fn decode(body: &[u8], max_decoded: usize) -> Result<WriteRequest, String> {
    let raw = crate::body::unsnappy(body, max_decoded).map_err(|e| e.to_string())?;
    WriteRequest::decode(raw.as_slice())
        .map_err(|e| format!("not a remote-write WriteRequest: {e}"))
}

/// Encodes a request as a remote-write body (the collector's journal, tests).
pub fn encode(req: &WriteRequest) -> Result<Vec<u8>, String> {
    snap::raw::Encoder::new()
        .compress_vec(&req.encode_to_vec())
        .map_err(|e| format!("compressing a remote-write body: {e}"))
}

/// The value of label `name`, when present and not empty.
pub fn label<'a>(ls: &'a [Label], name: &str) -> Option<&'a str> {
    ls.iter()
        .find(|l| l.name == name)
        .map(|l| l.value.as_str())
        .filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_limits() {
        let req = WriteRequest {
            timeseries: vec![TimeSeries {
                labels: vec![Label {
                    name: "__name__".into(),
                    value: "DCGM_FI_DEV_GPU_UTIL".into(),
                }],
                samples: vec![Sample {
                    value: 1.0,
                    timestamp: 2,
                }],
            }],
        };
        let body = encode(&req).unwrap();
        assert_eq!(decode(&body, 1 << 20).unwrap(), req);
        assert!(decode(&body, 3).unwrap_err().contains("the limit is 3"));
        assert!(decode(b"\xff\xff\xff\xff\x0f", 1 << 20).is_err());
        assert_eq!(
            label(&req.timeseries[0].labels, "__name__"),
            Some("DCGM_FI_DEV_GPU_UTIL")
        );
    }
}
