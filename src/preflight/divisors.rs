//! The divisors of a u64, found by factoring it (trial division, then Miller–Rabin and
//! Pollard's rho), so a search over the divisors of any config value takes microseconds,
//! whatever the value: never a count down from 2^32.

/// All divisors of `n` (n > 0), ascending. A u64 has at most 103680 of them.
pub fn divisors(n: u64) -> Vec<u64> {
    let mut primes = Vec::new();
    factor(n, &mut primes);
    primes.sort_unstable();
    let mut out = vec![1u64];
    let mut i = 0;
    while i < primes.len() {
        let p = primes[i];
        let k = primes[i..].iter().take_while(|&&q| q == p).count();
        let before = out.len();
        let mut power = 1u64;
        for _ in 0..k {
            power *= p;
            for j in 0..before {
                out.push(out[j] * power);
            }
        }
        i += k;
    }
    out.sort_unstable();
    out
}

pub fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// The least common multiple, None when it does not fit a u64.
pub fn lcm(a: u64, b: u64) -> Option<u64> {
    if a == 0 || b == 0 {
        return Some(0);
    }
    (a / gcd(a, b)).checked_mul(b)
}

fn mul_mod(a: u64, b: u64, m: u64) -> u64 {
    (u128::from(a) * u128::from(b) % u128::from(m)) as u64
}

fn pow_mod(mut base: u64, mut exp: u64, m: u64) -> u64 {
    let mut acc = 1 % m;
    base %= m;
    while exp > 0 {
        if exp & 1 == 1 {
            acc = mul_mod(acc, base, m);
        }
        base = mul_mod(base, base, m);
        exp >>= 1;
    }
    acc
}

/// Deterministic for every u64 with these bases.
fn is_prime(n: u64) -> bool {
    const BASES: [u64; 12] = [2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37];
    if n < 2 {
        return false;
    }
    if let Some(&p) = BASES.iter().find(|&&p| n % p == 0) {
        return n == p;
    }
    let (mut d, mut s) = (n - 1, 0);
    while d % 2 == 0 {
        d /= 2;
        s += 1;
    }
    BASES.iter().all(|&a| {
        let mut x = pow_mod(a, d, n);
        if x == 1 || x == n - 1 {
            return true;
        }
        for _ in 1..s {
            x = mul_mod(x, x, n);
            if x == n - 1 {
                return true;
            }
        }
        false
    })
}

/// A non-trivial factor of an odd composite `n` (Pollard's rho, Floyd's cycle finding).
fn rho(n: u64) -> u64 {
    for c in 1u64.. {
        let f = |x: u64| ((u128::from(x) * u128::from(x) + u128::from(c)) % u128::from(n)) as u64;
        let (mut x, mut y, mut d) = (2u64, 2u64, 1u64);
        while d == 1 {
            x = f(x);
            y = f(f(y));
            d = gcd(x.abs_diff(y), n);
        }
        if d != n {
            return d;
        }
    }
    unreachable!("some c finds a factor of a composite")
}

fn factor(mut n: u64, out: &mut Vec<u64>) {
    for p in 2..1000u64 {
        if p * p > n {
            break;
        }
        while n % p == 0 {
            out.push(p);
            n /= p;
        }
    }
    let mut stack = vec![n];
    while let Some(m) = stack.pop() {
        if m == 1 {
            continue;
        }
        if is_prime(m) {
            out.push(m);
        } else {
            let d = rho(m);
            stack.extend([d, m / d]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn divisors_of_small_and_hostile_values() {
        assert_eq!(divisors(1), [1]);
        assert_eq!(divisors(64), [1, 2, 4, 8, 16, 32, 64]);
        assert_eq!(divisors(96), [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 96]);
        // The largest u64 prime, and a semiprime of two ~2^32 primes: rho, not trial division.
        assert_eq!(divisors(18446744073709551557), [1, 18446744073709551557]);
        assert_eq!(divisors(4294967291 * 4294967279), [1, 4294967279, 4294967291, 4294967291 * 4294967279]);
        assert_eq!(divisors(u64::MAX).len(), 128); // 3 · 5 · 17 · 257 · 641 · 65537 · 6700417
        assert_eq!(divisors(1 << 63).len(), 64);
        assert_eq!((lcm(4, 6), lcm(u64::MAX, u64::MAX - 1)), (Some(12), None));
    }
}
