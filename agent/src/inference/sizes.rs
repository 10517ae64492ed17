//! Values scaled by the bytes their bubbles followed.
//!
//! Where a job's micro-batches' sequence lengths vary (packed or unpadded batches), a stage's
//! compute for a micro-batch and the messages it sends and receives for it vary together: a bubble
//! that waits for a message comes after the upstream stage resumed by a time about proportional
//! to its size, and the bubble after a send that waits for the next stage to return that
//! micro-batch's gradient lasts about in proportion to the send. A position's values (a bubble's
//! length, an anchored offset: [`super::pattern`], [`super::anchors`]) are then steadier scaled by
//! the bytes of the op each was learnt at; elsewhere scaling only adds the sizes' spread. So each
//! chain of values keeps a score of which of the two predicted its next value better, and a
//! prediction is made from the scaled values where that score says so (an anchor's offsets also
//! where, with no record yet, the scaled ones are clearly steadier). Where sizes do not vary
//! nothing changes.
use super::obs::Ns;
use super::pattern::VALUES;

/// With no record, scaled values are predicted from where their spread, against their median, is
/// under this share of the plain values' (values that agree are not made steadier by scaling).
const SCALED_SPREAD: f64 = 0.75;
/// The bound of a chain's score: a job whose sizes stop saying anything is followed within this
/// many bubbles.
const SCORE_BOUND: i8 = 3;

/// The values `v` (newest first) as they would be for a bubble that follows `to` bytes: each
/// scaled by `to` over the bytes its own bubble followed (`from`, parallel to `v`). `None` where a
/// size is not known or none differs from `to`.
pub fn scaled(v: &[Ns], from: &[u64], to: u64) -> Option<[Ns; VALUES]> {
    if to == 0 || from.contains(&0) || from.iter().all(|&x| x == to) {
        return None;
    }
    let mut out = [0; VALUES];
    for (o, (&x, &b)) in out.iter_mut().zip(v.iter().zip(from)) {
        *o = (x as u128 * to as u128 / b as u128).min(Ns::MAX as u128) as Ns;
    }
    Some(out)
}

/// A chain's score once its next value `x` is known, from what the plain and the scaled values
/// predicted for it: +1 where the scaled prediction was nearer, -1 where it was further.
pub fn rescored(score: i8, plain: Option<Ns>, scaled: Option<Ns>, x: Ns) -> i8 {
    let delta = match (plain, scaled) {
        (Some(p), Some(s)) => match s.abs_diff(x).cmp(&p.abs_diff(x)) {
            std::cmp::Ordering::Less => 1,
            std::cmp::Ordering::Greater => -1,
            std::cmp::Ordering::Equal => 0,
        },
        _ => 0,
    };
    (score + delta).clamp(-SCORE_BOUND, SCORE_BOUND)
}

/// Whether to predict from the scaled values, given the chain's score and (median, spread) of
/// the plain and of the scaled values: a score above 0, or none yet and the scaled values
/// clearly steadier against their median (scaled values are shorter or longer as a whole).
pub fn prefer_scaled(score: i8, plain: (Ns, Ns), scaled: (Ns, Ns)) -> bool {
    let relative = |(m, s): (Ns, Ns)| s as f64 / m.max(1) as f64;
    score > 0 || (score == 0 && relative(scaled) < SCALED_SPREAD * relative(plain))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_scale_to_the_bytes_of_the_bubble_predicted() {
        let v = scaled(&[10, 20], &[100, 200], 150).expect("sizes differ");
        assert_eq!(&v[..2], &[15, 15]);
        assert_eq!(scaled(&[10, 20], &[100, 100], 100), None);
        assert_eq!(scaled(&[10, 20], &[100, 0], 150), None);
        assert_eq!(scaled(&[10, 20], &[100, 200], 0), None);
    }

    #[test]
    fn the_score_follows_the_nearer_prediction_within_its_bound() {
        assert_eq!(rescored(0, Some(100), Some(90), 91), 1);
        assert_eq!(rescored(0, Some(100), Some(90), 99), -1);
        assert_eq!(rescored(2, Some(100), None, 99), 2);
        assert_eq!(rescored(SCORE_BOUND, Some(100), Some(90), 90), SCORE_BOUND);
        assert!(prefer_scaled(1, (100, 1), (100, 50)));
        assert!(!prefer_scaled(-1, (100, 50), (100, 1)));
        // No record: clearly steadier against the median, not merely shorter.
        assert!(prefer_scaled(0, (100, 20), (100, 10)));
        assert!(!prefer_scaled(0, (100, 10), (50, 5)));
        assert!(!prefer_scaled(0, (100, 0), (150, 0)));
    }
}
