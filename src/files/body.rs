//! The one way jetsink reads an HTTP response's body: chunk by chunk up to a stated bound,
//! so a server that streams without end (or announces gigabytes) costs at most the bound.
//! What happens past it is the caller's choice ([`Over`]): a command that needs the whole
//! answer refuses it (`jetsink metrics show --url`), a client that only drains the
//! connection keeps the first bytes and stops reading (the `http` destination, the OTLP
//! exporter).

/// What to do with a body longer than the bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Over {
    /// Fail with [`BodyError::TooLarge`]: a cut answer would be read wrongly.
    Refuse,
    /// Keep the first `limit` bytes and stop reading.
    Cut,
}

/// Why a body was not read.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    /// Longer than the bound (announced by `Content-Length`, or read so far).
    #[error("the response is larger than {}, the most read", super::read::Size(*.limit as u64))]
    TooLarge {
        /// The bound, in bytes.
        limit: usize,
    },
    /// The connection failed or timed out while the body was read.
    #[error("cannot read the response: {0}")]
    Read(#[source] reqwest::Error),
}

/// The body of `response`, at most `limit` bytes; past that, refused or cut (`over`).
pub async fn read(
    mut response: reqwest::Response,
    limit: usize,
    over: Over,
) -> Result<Vec<u8>, BodyError> {
    let announced = response.content_length().unwrap_or(0);
    if over == Over::Refuse && announced > limit as u64 {
        return Err(BodyError::TooLarge { limit });
    }
    let mut body = Vec::with_capacity(usize::try_from(announced).unwrap_or(0).min(limit));
    while let Some(chunk) = response.chunk().await.map_err(BodyError::Read)? {
        let room = limit - body.len();
        if chunk.len() > room {
            return match over {
                Over::Refuse => Err(BodyError::TooLarge { limit }),
                Over::Cut => {
                    body.extend_from_slice(&chunk[..room]);
                    Ok(body)
                }
            };
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;

    /// Serves one connection: `head`, then `body` repeated `times` times (`None`: until
    /// the client hangs up).
    fn serve(head: &'static str, body: &'static [u8], times: Option<usize>) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut req = [0u8; 1024];
            let _ = s.read(&mut req);
            let _ = s.write_all(head.as_bytes());
            let mut sent = 0;
            while times.is_none_or(|t| sent < t) {
                if s.write_all(body).is_err() {
                    return;
                }
                sent += 1;
            }
        });
        format!("http://{addr}/")
    }

    async fn get(url: &str) -> reqwest::Response {
        reqwest::Client::new().get(url).send().await.unwrap()
    }

    #[tokio::test]
    async fn an_endless_body_is_refused_or_cut_at_the_bound() {
        let endless = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n";
        let url = serve(endless, &[b'x'; 8192], None);
        let e = read(get(&url).await, 1 << 20, Over::Refuse)
            .await
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "the response is larger than 1 MiB, the most read"
        );
        let url = serve(endless, &[b'x'; 8192], None);
        let cut = read(get(&url).await, 100_000, Over::Cut).await.unwrap();
        assert_eq!(cut.len(), 100_000);
    }

    #[tokio::test]
    async fn a_body_within_the_bound_is_read_whole_and_an_announced_giant_is_not_read() {
        let small = "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\n";
        let url = serve(small, b"abc", Some(2));
        assert_eq!(
            read(get(&url).await, 6, Over::Refuse).await.unwrap(),
            b"abcabc"
        );
        let giant = "HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n";
        let url = serve(giant, b"abc", Some(1));
        assert!(matches!(
            read(get(&url).await, 1024, Over::Refuse).await,
            Err(BodyError::TooLarge { limit: 1024 })
        ));
    }
}
