use super::*;

#[test]
fn tcp_urls_parse() {
    let c = HttpCheck::parse("http://127.0.0.1:8080/health?x=1#frag").unwrap();
    assert_eq!(c.to, Target::Tcp("127.0.0.1:8080".parse().unwrap()));
    assert_eq!(c.path, "/health?x=1");
    assert_eq!(c.host, "127.0.0.1:8080");
    let c = HttpCheck::parse("http://[::1]").unwrap();
    assert_eq!(c.to, Target::Tcp("[::1]:80".parse().unwrap()));
    assert_eq!(c.path, "/");
    let c = HttpCheck::parse("http://127.0.0.1:81?q").unwrap();
    assert_eq!(c.path, "/?q");
}

#[test]
fn unix_urls_parse() {
    let c = HttpCheck::parse("http+unix://%2Frun%2Fapp.sock/health").unwrap();
    assert_eq!(c.to, Target::Unix("/run/app.sock".into()));
    assert_eq!(c.path, "/health");
    assert_eq!(c.host, "localhost");
}

#[test]
fn bad_urls_say_why_and_name_the_url() {
    for (url, why) in [
        ("https://127.0.0.1/", "no TLS"),
        ("ftp://x/", "expected http://"),
        ("http:///x", "no host"),
        ("http://127.0.0.1:99999/", "port \"99999\""),
        ("http://127.0.0.1:80/a b", "space"),
        ("http+unix://run.sock/", "absolute"),
        ("http+unix://%2Frun%zz/", "%-escape"),
        ("http://u@127.0.0.1/", "user information"),
        ("http://[::1/", "unclosed"),
    ] {
        let e = HttpCheck::parse(url).unwrap_err().to_string();
        assert!(e.contains(url) && e.contains(why), "{url}: {e}");
    }
}

#[test]
fn status_lines_are_judged() {
    let any = HttpCheck::parse("http://127.0.0.1/").unwrap();
    assert!(matches!(any.judge(b"HTTP/1.1 200 OK\r"), Answer::Ready));
    assert!(matches!(any.judge(b"HTTP/1.0 204"), Answer::Ready));
    assert!(
        matches!(any.judge(b"HTTP/1.1 503 Service Unavailable\r"), Answer::NotYet(w) if w.contains("503 Service Unavailable"))
    );
    assert!(
        matches!(any.judge(b"SSH-2.0-OpenSSH\r"), Answer::NotYet(w) if w.contains("not an HTTP status line") && w.contains("SSH-2.0"))
    );
    assert!(matches!(any.judge(b"HTTP/1.1 2000 OK"), Answer::NotYet(_)));
    let only_204 = any.clone().status(204);
    assert!(matches!(
        only_204.judge(b"HTTP/1.1 200 OK"),
        Answer::NotYet(_)
    ));
    assert!(matches!(
        only_204.judge(b"HTTP/1.1 204 No Content"),
        Answer::Ready
    ));
}
