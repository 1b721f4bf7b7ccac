//! The nearest-centroid rule every encoder (host, kernel) and k-means follow bit for bit.

/// The index of the centroid nearest to `x` among `centroids` (`k >= 1` rows of `x.len()`), by
/// squared L2 distance summed channel by channel in order in f32, starting from centroid 0 and
/// moving only to a strictly smaller distance (the lowest index wins a tie; a NaN input gives 0).
pub fn nearest_centroid(x: &[f32], centroids: &[f32]) -> u32 {
    let distance = |centroid: &[f32]| {
        let mut dist = 0.0f32;
        for (a, b) in x.iter().zip(centroid) {
            let diff = a - b;
            dist += diff * diff;
        }
        dist
    };
    let mut rows = centroids.chunks_exact(x.len());
    let mut best = rows.next().map_or(f32::INFINITY, distance);
    let mut best_index = 0u32;
    for (c, centroid) in rows.enumerate() {
        let dist = distance(centroid);
        if dist < best {
            best = dist;
            best_index = c as u32 + 1;
        }
    }
    best_index
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_the_closest_and_the_lowest_index_on_ties() {
        let centroids = [0.0, 0.0, 1.0, 1.0, -1.0, 1.0, 1.0, 1.0];
        assert_eq!(nearest_centroid(&[0.9, 1.2], &centroids), 1);
        assert_eq!(nearest_centroid(&[-0.8, 0.7], &centroids), 2);
        // Exactly between 0 and 1 along the diagonal... (0.5, 0.5) is at 0.5 from both.
        assert_eq!(nearest_centroid(&[0.5, 0.5], &centroids), 0);
        // Centroid 3 duplicates centroid 1: 1 wins.
        assert_eq!(nearest_centroid(&[1.0, 1.0], &centroids), 1);
    }
}
