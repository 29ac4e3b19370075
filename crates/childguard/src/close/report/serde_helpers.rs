//! Serde helpers of [`super`]: durations as fractional milliseconds, wall-clock times as Unix
//! milliseconds, exit statuses as code and signal.

pub(crate) mod millis {
    use std::time::Duration;

    pub(crate) fn serialize<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64() * 1000.0)
    }
}

pub(crate) mod opt_millis {
    use std::time::Duration;

    pub(crate) fn serialize<S: serde::Serializer>(
        d: &Option<Duration>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&(d.as_secs_f64() * 1000.0)),
            None => s.serialize_none(),
        }
    }
}

pub(crate) mod unix_millis {
    use std::time::{SystemTime, UNIX_EPOCH};

    pub(crate) fn serialize<S: serde::Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
        let ms = t
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0);
        s.serialize_u128(ms)
    }
}

pub(crate) mod status {
    use serde::ser::SerializeStruct;
    use std::os::unix::process::ExitStatusExt;
    use std::process::ExitStatus;

    pub(crate) fn serialize<S: serde::Serializer>(
        st: &Option<ExitStatus>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match st {
            None => s.serialize_none(),
            Some(st) => {
                let mut out = s.serialize_struct("ExitStatus", 2)?;
                out.serialize_field("code", &st.code())?;
                out.serialize_field("signal", &st.signal())?;
                out.end()
            }
        }
    }
}
